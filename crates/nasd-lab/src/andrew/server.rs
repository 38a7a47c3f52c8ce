//! The baseline of the Andrew-style benchmark: a plain store-and-forward file server. It
//! keeps the files in a local directory and serves every file operation (names, attributes
//! and data alike) over TCP ([`super::proto`]), so every byte a client writes or reads passes
//! through this one process on its way to or from the disk, as it passed through the NFS or
//! AFS server of seed 002 §4.2. Its clients mount it through FUSE ([`super::client`]).
//!
//! One thread per connection, at most [`CONNECTIONS_MAX`] at once (later ones are closed at
//! once). Requests name paths under the served root only: absolute, no `.`, `..` or empty
//! component. The server is stateless between requests, as NFSv3 is: a read or a write
//! opens the file, moves the bytes and closes it.
//!
//! [`Durability::Stable`] answers as an NFSv3 server does (RFC 1813; Linux's default `sync`
//! export), and as nasd's manager and drives do: an operation that changes a name or an
//! attribute is on disk before its reply (the file and its directory are fsynced), a write
//! is not, and a commit, which the client sends when it closes a file it wrote, puts the
//! file's data on disk. [`Durability::Async`] never syncs (an `async` export): it shows what
//! the disk's syncs cost.

use std::fs::{self, File, OpenOptions};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::{
    DirBuilderExt as _, FileExt as _, MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _,
};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use super::proto::{
    read_frame, write_frame, Attr, ErrorCode, Kind, Op, Reply, Request, DATA_BYTES_MAX,
    ENTRIES_MAX, NAME_BYTES_MAX,
};
use crate::error::LabError;

/// Connections served at once.
pub const CONNECTIONS_MAX: usize = 64;

/// When the server's changes reach the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Names and attributes before the reply, data at a commit (NFSv3).
    Stable,
    /// Whenever the kernel writes back its cache.
    Async,
}

/// Serves the files under `root` on `listen` until the process ends. Calls `on_listening`
/// with the bound address once it accepts connections.
pub fn serve(
    listen: &str,
    root: &Path,
    durability: Durability,
    on_listening: impl FnOnce(std::net::SocketAddr),
) -> Result<(), LabError> {
    let root = fs::canonicalize(root)
        .map_err(|e| LabError::Baseline(format!("{}: {e}", root.display())))?;
    if !root.is_dir() {
        return Err(LabError::Baseline(format!(
            "{}: not a directory",
            root.display()
        )));
    }
    let listener = TcpListener::bind(listen)
        .map_err(|e| LabError::Baseline(format!("listening on {listen}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| LabError::Baseline(e.to_string()))?;
    on_listening(bound);
    let root = Arc::new(root);
    let open = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        let conn = match conn {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("baseline server: accept: {e}");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        if open.fetch_add(1, Ordering::AcqRel) >= CONNECTIONS_MAX {
            open.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!("baseline server: {CONNECTIONS_MAX} connections already; closing one");
            continue;
        }
        let (root, open) = (root.clone(), open.clone());
        std::thread::spawn(move || {
            if let Err(e) = serve_connection(conn, &root, durability) {
                tracing::debug!("baseline server: connection ended: {e}");
            }
            open.fetch_sub(1, Ordering::AcqRel);
        });
    }
    Ok(())
}

/// One connection: requests answered in order until the peer closes. A request that does
/// not decode ends the connection (the stream can no longer be trusted to be in step).
fn serve_connection(mut conn: TcpStream, root: &Path, d: Durability) -> std::io::Result<()> {
    conn.set_nodelay(true)?;
    while let Some(body) = read_frame(&mut conn)? {
        let req = Request::decode(&body)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
        let reply = answer(root, req, d).unwrap_or_else(Reply::Error);
        write_frame(&mut conn, &reply.encode())?;
    }
    Ok(())
}

/// The local path of a request's path: under `root`, absolute, no `.`, `..` or empty part.
pub fn local(root: &Path, path: &str) -> Result<PathBuf, ErrorCode> {
    let rest = path.strip_prefix('/').ok_or(ErrorCode::Invalid)?;
    let mut p = root.to_path_buf();
    if rest.is_empty() {
        return Ok(p);
    }
    for part in rest.split('/') {
        if part.is_empty() || part == "." || part == ".." || part.contains('\0') {
            return Err(ErrorCode::Invalid);
        }
        if part.len() > NAME_BYTES_MAX {
            return Err(ErrorCode::NameTooLong);
        }
        p.push(part);
    }
    Ok(p)
}

fn io(e: std::io::Error) -> ErrorCode {
    ErrorCode::of_io(&e)
}

/// The attributes of `p`, not following a final symbolic link.
fn attr_of(p: &Path) -> Result<Attr, ErrorCode> {
    let m = fs::symlink_metadata(p).map_err(io)?;
    Ok(attr_from(&m))
}

fn attr_from(m: &fs::Metadata) -> Attr {
    let ft = m.file_type();
    let kind = if ft.is_dir() {
        Kind::Dir
    } else if ft.is_symlink() {
        Kind::Symlink
    } else {
        Kind::File
    };
    let us = |s: i64, ns: i64| (s.max(0) as u64) * 1_000_000 + (ns.max(0) as u64) / 1000;
    Attr {
        kind,
        mode: m.mode() & 0o7777,
        size: m.size(),
        mtime_us: us(m.mtime(), m.mtime_nsec()),
        ctime_us: us(m.ctime(), m.ctime_nsec()),
        ino: m.ino(),
        nlink: m.nlink() as u32,
        uid: m.uid(),
        gid: m.gid(),
    }
}

/// One request, one small function per operation; then, for a stable server, the syncs
/// the operation needs before its reply.
fn answer(root: &Path, req: Request, d: Durability) -> Result<Reply, ErrorCode> {
    let p = local(root, &req.path)?;
    let (reply, sync) = match req.op {
        Op::Stat => (attr_of(&p).map(Reply::Attr)?, Sync::Nothing),
        Op::List => (list(&p)?, Sync::Nothing),
        Op::Mkdir { mode } => (mkdir(&p, mode)?, Sync::FileAndParent(p)),
        Op::Create { mode } => (create(&p, mode)?, Sync::FileAndParent(p)),
        Op::Read { offset, length } => (read(&p, offset, length)?, Sync::Nothing),
        Op::Write { offset, data } => (write(&p, offset, &data)?, Sync::Nothing),
        Op::Truncate { size } => (truncate(&p, size)?, Sync::File(p)),
        Op::Unlink => {
            fs::remove_file(&p).map_err(io)?;
            (Reply::Done, Sync::Parent(p))
        }
        Op::Rmdir => {
            fs::remove_dir(&p).map_err(io)?;
            (Reply::Done, Sync::Parent(p))
        }
        Op::Rename { to } => {
            let to = local(root, &to)?;
            fs::rename(&p, &to).map_err(io)?;
            (Reply::Done, Sync::Parents(p, to))
        }
        Op::Chmod { mode } => (chmod(&p, mode)?, Sync::File(p)),
        Op::Utimes { mtime_us } => (utimes(&p, mtime_us)?, Sync::File(p)),
        Op::Commit => (Reply::Done, Sync::Data(p)),
    };
    if d == Durability::Stable {
        sync.run()?;
    }
    Ok(reply)
}

/// What must be on disk before a stable server replies.
enum Sync {
    Nothing,
    /// The file's data (a commit).
    Data(PathBuf),
    /// The file's attributes and data.
    File(PathBuf),
    /// The directory holding the name.
    Parent(PathBuf),
    /// A new name: the file (or directory) and its directory.
    FileAndParent(PathBuf),
    /// A rename: both directories.
    Parents(PathBuf, PathBuf),
}

impl Sync {
    fn run(self) -> Result<(), ErrorCode> {
        let file = |p: &Path| File::open(p).and_then(|f| f.sync_all()).map_err(io);
        let parent = |p: &Path| file(p.parent().unwrap_or(p));
        match self {
            Sync::Nothing => Ok(()),
            Sync::Data(p) => File::open(&p).and_then(|f| f.sync_data()).map_err(io),
            Sync::File(p) => file(&p),
            Sync::Parent(p) => parent(&p),
            Sync::FileAndParent(p) => file(&p).and_then(|()| parent(&p)),
            Sync::Parents(a, b) => {
                parent(&a)?;
                if a.parent() != b.parent() {
                    parent(&b)?;
                }
                Ok(())
            }
        }
    }
}

fn list(p: &Path) -> Result<Reply, ErrorCode> {
    let mut v = vec![];
    for e in fs::read_dir(p).map_err(io)? {
        let e = e.map_err(io)?;
        let Ok(name) = e.file_name().into_string() else {
            continue; // names that are not UTF-8 are not served
        };
        if v.len() == ENTRIES_MAX {
            return Err(ErrorCode::Io);
        }
        let m = fs::symlink_metadata(e.path()).map_err(io)?;
        v.push((name, attr_from(&m)));
    }
    Ok(Reply::Entries(v))
}

fn mkdir(p: &Path, mode: u32) -> Result<Reply, ErrorCode> {
    fs::DirBuilder::new()
        .mode(mode & 0o7777)
        .create(p)
        .map_err(io)?;
    attr_of(p).map(Reply::Attr)
}

fn create(p: &Path, mode: u32) -> Result<Reply, ErrorCode> {
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode & 0o7777)
        .open(p)
        .map_err(io)?;
    f.metadata().map(|m| Reply::Attr(attr_from(&m))).map_err(io)
}

fn read(p: &Path, offset: u64, length: u32) -> Result<Reply, ErrorCode> {
    let f = File::open(p).map_err(io)?;
    let mut buf = vec![0u8; (length as usize).min(DATA_BYTES_MAX)];
    let mut got = 0;
    while got < buf.len() {
        match f.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io(e)),
        }
    }
    buf.truncate(got);
    Ok(Reply::Data(buf))
}

fn write(p: &Path, offset: u64, data: &[u8]) -> Result<Reply, ErrorCode> {
    let f = OpenOptions::new().write(true).open(p).map_err(io)?;
    f.write_all_at(data, offset).map_err(io)?;
    Ok(Reply::Written(data.len() as u32))
}

fn truncate(p: &Path, size: u64) -> Result<Reply, ErrorCode> {
    let f = OpenOptions::new().write(true).open(p).map_err(io)?;
    f.set_len(size).map_err(io)?;
    f.metadata().map(|m| Reply::Attr(attr_from(&m))).map_err(io)
}

fn chmod(p: &Path, mode: u32) -> Result<Reply, ErrorCode> {
    fs::set_permissions(p, fs::Permissions::from_mode(mode & 0o7777)).map_err(io)?;
    attr_of(p).map(Reply::Attr)
}

fn utimes(p: &Path, mtime_us: u64) -> Result<Reply, ErrorCode> {
    let t = UNIX_EPOCH + Duration::from_micros(mtime_us);
    let f = File::options()
        .write(true)
        .open(p)
        .or_else(|_| File::open(p));
    f.map_err(io)?.set_modified(t).map_err(io)?;
    attr_of(p).map(Reply::Attr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_clean_paths_under_the_root_are_served() {
        let r = Path::new("/srv/x");
        assert_eq!(local(r, "/").unwrap(), PathBuf::from("/srv/x"));
        assert_eq!(local(r, "/a/b.c").unwrap(), PathBuf::from("/srv/x/a/b.c"));
        for bad in [
            "",
            "a",
            "/../etc",
            "/a/../../b",
            "/a//b",
            "/a/",
            "/./a",
            "/a\0b",
        ] {
            assert_eq!(local(r, bad), Err(ErrorCode::Invalid), "{bad:?}");
        }
        let long = format!("/{}", "n".repeat(NAME_BYTES_MAX + 1));
        assert_eq!(local(r, &long), Err(ErrorCode::NameTooLong));
    }

    #[test]
    fn operations_act_on_the_served_directory() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let req = |path: &str, op| {
            answer(
                root,
                Request {
                    path: path.into(),
                    op,
                },
                Durability::Stable,
            )
        };
        assert!(
            matches!(req("/d", Op::Mkdir { mode: 0o755 }), Ok(Reply::Attr(a)) if a.kind == Kind::Dir)
        );
        assert!(
            matches!(req("/d/f", Op::Create { mode: 0o600 }), Ok(Reply::Attr(a)) if a.size == 0 && a.mode == 0o600)
        );
        assert_eq!(
            req(
                "/d/f",
                Op::Write {
                    offset: 2,
                    data: b"xyz".to_vec()
                }
            ),
            Ok(Reply::Written(3))
        );
        assert_eq!(
            req(
                "/d/f",
                Op::Read {
                    offset: 1,
                    length: 100
                }
            ),
            Ok(Reply::Data(b"\0xyz".to_vec()))
        );
        let Ok(Reply::Entries(e)) = req("/d", Op::List) else {
            panic!("no listing")
        };
        assert_eq!(e.len(), 1);
        assert_eq!((e[0].0.as_str(), e[0].1.size), ("f", 5));
        assert_eq!(req("/d", Op::Rmdir), Err(ErrorCode::NotEmpty));
        assert_eq!(req("/d/f", Op::Rename { to: "/g".into() }), Ok(Reply::Done));
        assert_eq!(req("/d/f", Op::Stat), Err(ErrorCode::NotFound));
        assert!(matches!(req("/g", Op::Truncate { size: 1 }), Ok(Reply::Attr(a)) if a.size == 1));
        assert!(
            matches!(req("/g", Op::Chmod { mode: 0o755 }), Ok(Reply::Attr(a)) if a.mode == 0o755)
        );
        assert!(
            matches!(req("/g", Op::Utimes { mtime_us: 5_000_000 }), Ok(Reply::Attr(a)) if a.mtime_us == 5_000_000)
        );
        assert_eq!(req("/g", Op::Commit), Ok(Reply::Done));
        assert_eq!(req("/g", Op::Unlink), Ok(Reply::Done));
        assert_eq!(req("/g", Op::Commit), Err(ErrorCode::NotFound));
        assert_eq!(req("/d", Op::Rmdir), Ok(Reply::Done));
        assert_eq!(req("/d", Op::Mkdir { mode: 0o755 }).map(|_| ()), Ok(()));
        assert_eq!(req("/d", Op::Mkdir { mode: 0o755 }), Err(ErrorCode::Exists));
        assert_eq!(req("/../x", Op::Stat), Err(ErrorCode::Invalid));
    }
}
