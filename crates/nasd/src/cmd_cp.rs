//! `nasd cp`: copies into the cluster, out of it, and within it, as GNU `cp` would.
//!
//! Modes: a new destination file or directory gets the source's permission bits under the
//! umask (never more than the source had); an existing destination file keeps its own mode.
//! With `-p` (or `-a`, which is `-r -p`), the source's permission bits and modify time are
//! kept exactly, both ways. Special bits (set-user-id, set-group-id, sticky) are never copied:
//! nasd files are not executed from the cluster, and a set-id bit that came back on a download
//! would make a local file set-id.
//!
//! Destinations: a destination that is an existing directory receives the source under its
//! own name. A destination written with a trailing slash must be such a directory (unless the
//! source is a directory copied with `-r`, which then creates it), and so must the destination
//! of several sources; a trailing slash never creates a file.

use crate::cmd_fs::{connect, join, progress_bar, remote, upload_name, PROGRESS_BYTES_MIN};
use anyhow::{bail, Context as _};
use clap::Args;
use nasd_client::escape::shown;
use nasd_client::files::Client;
use nasd_client::transfer::LocalFinish;
use nasd_proto::manager::{FileKind, FileStat, MgrStatus};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// The permission bits a copy carries (rwx for user, group, other).
const PERMISSION_BITS: u32 = 0o777;
/// Bits a directory has while the copy fills it, so the copy can write into it whatever mode
/// it ends with.
const DIR_FILLING_BITS: u32 = 0o700;

#[derive(Args, Debug)]
pub struct CpArgs {
    /// Copy directories recursively.
    #[arg(short = 'r', long)]
    pub recursive: bool,
    /// Keep permission bits and modify times (both ways; special bits are never copied).
    #[arg(short = 'p', long = "preserve")]
    pub preserve: bool,
    /// Archive: -r and -p.
    #[arg(short = 'a', long)]
    pub archive: bool,
    /// Sources then the destination; remote paths are written nasd:/path.
    #[arg(required = true, num_args = 2..)]
    pub paths: Vec<String>,
}

/// What every step of one `cp` needs to know.
#[derive(Clone, Copy, Debug)]
struct CopyOpts {
    recursive: bool,
    preserve: bool,
    umask: u32,
}

/// The process's umask, read without changing it: from `/proc/self/status` (Linux 4.7+), else
/// by setting and restoring it, which is safe here because `cp` has created no file yet.
pub(crate) fn umask() -> u32 {
    let from_proc = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        });
    if let Some(m) = from_proc {
        return m;
    }
    // SAFETY: umask only swaps the process's mask; it is restored at once.
    let m = unsafe { libc::umask(0o077) };
    // SAFETY: as above.
    unsafe { libc::umask(m) };
    m as u32
}

/// The bits a copy gives a new destination: the source's permission bits, under the umask
/// unless preserving (GNU cp).
fn new_mode(src_mode: u32, o: &CopyOpts) -> u32 {
    let bits = src_mode & PERMISSION_BITS;
    if o.preserve {
        bits
    } else {
        bits & !o.umask
    }
}

/// A local file's modify time in microseconds since the Unix epoch (0 before it).
fn mtime_us_of(md: &std::fs::Metadata) -> u64 {
    (md.mtime().max(0) as u64) * 1_000_000 + md.mtime_nsec().max(0) as u64 / 1000
}

/// Sets a local path's modify time.
fn set_local_mtime(p: &Path, mtime_us: u64) -> std::io::Result<()> {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_micros(mtime_us);
    std::fs::File::open(p)?.set_times(std::fs::FileTimes::new().set_modified(t))
}

/// `cp -p` on a remote path: its mode (when it differs) and modify time.
async fn preserve_remote(c: &Client, dst: &str, mode: u32, mtime_us: u64) -> anyhow::Result<()> {
    let st = c.stat(dst).await?;
    if st.mode & 0o7777 != mode {
        c.chmod(dst, mode)
            .await
            .with_context(|| format!("nasd:{}: copied, but its mode was not kept", shown(dst)))?;
    }
    c.utimes(dst, mtime_us)
        .await
        .with_context(|| format!("nasd:{}: copied, but its time was not kept", shown(dst)))?;
    Ok(())
}

/// The remote path a source is copied to: into `dst` under the source's `name` when `dst` is
/// a directory; else `dst` itself, unless `dst` must be a directory (a trailing slash, several
/// sources).
async fn remote_target(
    c: &Client,
    dst: &str,
    name: impl FnOnce() -> anyhow::Result<String>,
    src_is_dir: bool,
    many: bool,
) -> anyhow::Result<String> {
    let must_be_dir = many || (dst.ends_with('/') && !src_is_dir);
    match c.stat(dst).await {
        Ok(st) if st.kind == FileKind::Dir => Ok(join(dst, &name()?)),
        Ok(_) if must_be_dir || dst.ends_with('/') => {
            bail!("nasd:{}: not a directory", shown(dst))
        }
        Ok(_) => Ok(dst.to_string()),
        Err(e) if e.status() == Some(MgrStatus::NoSuchPath) && !must_be_dir => Ok(dst.to_string()),
        Err(e) if e.status() == Some(MgrStatus::NoSuchPath) => {
            bail!("nasd:{}: no such directory", shown(dst))
        }
        Err(e) => Err(e.into()),
    }
}

/// The local path a remote source named `name` is copied to (the same rules as
/// [`remote_target`]).
fn local_target(dst: &str, name: &str, src_is_dir: bool, many: bool) -> anyhow::Result<PathBuf> {
    let d = PathBuf::from(dst);
    let must_be_dir = many || (dst.ends_with('/') && !src_is_dir);
    if d.is_dir() {
        return Ok(d.join(name));
    }
    if must_be_dir || (dst.ends_with('/') && d.exists()) {
        bail!(
            "{dst}: {}",
            if d.exists() {
                "not a directory"
            } else {
                "no such directory"
            }
        );
    }
    Ok(d)
}

/// Uploads a local file or (with `-r`) tree to `dst`; returns bytes copied.
async fn upload_path(c: &Arc<Client>, src: &Path, dst: &str, o: &CopyOpts) -> anyhow::Result<u64> {
    let mut md = std::fs::symlink_metadata(src).with_context(|| format!("{}", src.display()))?;
    if md.is_symlink() {
        if o.recursive {
            // GNU cp -r copies a symbolic link as a link, its target as it is written.
            return upload_symlink(c, src, dst).await;
        }
        md = std::fs::metadata(src).with_context(|| format!("{}", src.display()))?;
    }
    if md.is_dir() {
        if !o.recursive {
            bail!("{}: is a directory (use cp -r)", src.display());
        }
        return upload_dir(c, src, dst, &md, o).await;
    }
    if !md.is_file() {
        eprintln!(
            "nasd: skipping {}: {} (cp copies regular files, directories and symbolic links)",
            src.display(),
            special_kind(&md)
        );
        return Ok(0);
    }
    let mode = new_mode(md.mode(), o);
    let pb = progress_bar(md.len(), &shown(dst));
    let n = c.put_file(src, dst, mode, pb).await?;
    if o.preserve {
        preserve_remote(c, dst, mode, mtime_us_of(&md)).await?;
    }
    Ok(n)
}

/// What a file that is neither regular, directory nor link is, for the skip message.
fn special_kind(md: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = md.file_type();
    if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_char_device() {
        "a character device"
    } else {
        "not a regular file"
    }
}

/// Makes `dst` a symbolic link with the target of the local link `src`. A link already there
/// with the same target is left as it is (a repeated copy); anything else there is an error,
/// as for GNU cp without `-f`.
async fn upload_symlink(c: &Arc<Client>, src: &Path, dst: &str) -> anyhow::Result<u64> {
    let t = std::fs::read_link(src).with_context(|| format!("{}", src.display()))?;
    let Some(t) = t.to_str() else {
        eprintln!(
            "nasd: skipping {}: the link's target is not valid UTF-8 (nasd names are UTF-8)",
            src.display()
        );
        return Ok(0);
    };
    match c.symlink(t, dst).await {
        Err(e) if e.status() == Some(MgrStatus::Exists) => {
            if c.readlink(dst).await.ok().as_deref() != Some(t) {
                return Err(e.into());
            }
            Ok(0)
        }
        r => Ok(r.map(|()| 0)?),
    }
}

/// Makes the local `dst` a symbolic link with the target of the remote link `src` (a link
/// already there with the same target is left as it is).
async fn download_symlink(c: &Arc<Client>, src: &str, dst: &Path) -> anyhow::Result<u64> {
    let t = c.readlink(src).await?;
    if std::fs::read_link(dst).is_ok_and(|have| have == Path::new(&t)) {
        return Ok(0);
    }
    std::os::unix::fs::symlink(&t, dst).with_context(|| format!("{}", dst.display()))?;
    Ok(0)
}

async fn upload_dir(
    c: &Arc<Client>,
    src: &Path,
    dst: &str,
    md: &std::fs::Metadata,
    o: &CopyOpts,
) -> anyhow::Result<u64> {
    let mode = new_mode(md.mode(), o);
    let created = match c.mkdir(dst, mode | DIR_FILLING_BITS).await {
        Ok(()) => true,
        Err(e) if e.status() == Some(MgrStatus::Exists) => false,
        Err(e) => return Err(e.into()),
    };
    let mut total = 0;
    let mut entries: Vec<_> = std::fs::read_dir(src)
        .with_context(|| format!("{}", src.display()))?
        .collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = upload_name(&e.path())?;
        total += Box::pin(upload_path(c, &e.path(), &join(dst, &name), o)).await?;
    }
    if o.preserve {
        preserve_remote(c, dst, mode, mtime_us_of(md)).await?;
    } else if created && mode != mode | DIR_FILLING_BITS {
        c.chmod(dst, mode).await?;
    }
    Ok(total)
}

/// The mode a downloaded file ends with: the remote bits with `-p`; an existing local file's
/// own mode (GNU cp keeps it); else the remote bits under the umask.
fn download_mode(st: &FileStat, dst: &Path, o: &CopyOpts) -> u32 {
    if o.preserve {
        return new_mode(st.mode, o);
    }
    match std::fs::metadata(dst) {
        Ok(m) if m.is_file() => m.permissions().mode() & 0o7777,
        _ => new_mode(st.mode, o),
    }
}

/// Downloads a remote file or (with `-r`) tree to `dst`; returns bytes copied.
async fn download_path(
    c: &Arc<Client>,
    src: &str,
    dst: &Path,
    o: &CopyOpts,
) -> anyhow::Result<u64> {
    let st = c.stat(src).await?;
    if st.kind == FileKind::Dir {
        if !o.recursive {
            bail!("nasd:{}: is a directory (use cp -r)", shown(src));
        }
        return download_dir(c, src, dst, &st, o).await;
    }
    if st.kind.special() {
        eprintln!(
            "nasd: skipping nasd:{}: a special file (cp copies regular files, directories and symbolic links)",
            shown(src)
        );
        return Ok(0);
    }
    let finish = LocalFinish {
        mode: download_mode(&st, dst, o),
        mtime_us: o.preserve.then_some(st.mtime_us),
    };
    let pb = progress_bar(st.size, &shown(src));
    Ok(c.get_file(src, dst, finish, pb).await?)
}

async fn download_dir(
    c: &Arc<Client>,
    src: &str,
    dst: &Path,
    st: &FileStat,
    o: &CopyOpts,
) -> anyhow::Result<u64> {
    let mode = new_mode(st.mode, o);
    let created = match std::fs::DirBuilder::new()
        .mode(mode | DIR_FILLING_BITS)
        .create(dst)
    {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dst.is_dir() => false,
        Err(e) => return Err(e).with_context(|| format!("{}", dst.display())),
    };
    let mut total = 0;
    for e in c.list(src).await? {
        // Names come from the manager, which refuses `/`, `..` and `.`; check anyway
        // before touching the local file system.
        if e.name.contains('/') || e.name == ".." || e.name == "." || e.name.contains('\0') {
            bail!(
                "nasd:{}: refusing the entry name {}",
                shown(src),
                shown(&e.name)
            );
        }
        let (from, to) = (join(src, &e.name), dst.join(&e.name));
        total += if e.stat.kind == FileKind::Symlink {
            download_symlink(c, &from, &to).await?
        } else {
            Box::pin(download_path(c, &from, &to, o)).await?
        };
    }
    if created || o.preserve {
        std::fs::set_permissions(dst, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("{}", dst.display()))?;
    }
    if o.preserve {
        set_local_mtime(dst, st.mtime_us).with_context(|| format!("{}", dst.display()))?;
    }
    Ok(total)
}

/// Copies a remote file to another remote path, streaming.
async fn copy_remote(c: &Arc<Client>, src: &str, dst: &str, o: &CopyOpts) -> anyhow::Result<u64> {
    let st = c.stat(src).await?;
    if st.kind == FileKind::Dir {
        bail!(
            "nasd:{}: is a directory (copies within the cluster take files)",
            shown(src)
        );
    }
    let mode = new_mode(st.mode, o);
    let pb = progress_bar(st.size, &shown(dst));
    let n = c.copy(src, dst, mode, pb).await?;
    if o.preserve {
        preserve_remote(c, dst, mode, st.mtime_us).await?;
    }
    Ok(n)
}

/// Uploads `src` (a tree with `recursive`) to exactly `dst`, as `cp` without `-p` would.
pub(crate) async fn upload(
    c: &Arc<Client>,
    src: &Path,
    dst: &str,
    recursive: bool,
) -> anyhow::Result<u64> {
    let o = CopyOpts {
        recursive,
        preserve: false,
        umask: umask(),
    };
    upload_path(c, src, dst, &o).await
}

/// Downloads `src` (a tree with `recursive`) to exactly `dst`, as `cp` without `-p` would.
pub(crate) async fn download(
    c: &Arc<Client>,
    src: &str,
    dst: &Path,
    recursive: bool,
) -> anyhow::Result<u64> {
    let o = CopyOpts {
        recursive,
        preserve: false,
        umask: umask(),
    };
    download_path(c, src, dst, &o).await
}

/// The last name of a remote path (`root` for `/`).
fn remote_name(p: &str) -> &str {
    p.rsplit('/').find(|n| !n.is_empty()).unwrap_or("root")
}

pub async fn cp(a: CpArgs) -> anyhow::Result<()> {
    let (dst, srcs) = a.paths.split_last().expect("clap requires two");
    let o = CopyOpts {
        recursive: a.recursive || a.archive,
        preserve: a.preserve || a.archive,
        umask: umask(),
    };
    let many = srcs.len() > 1;
    let c = connect().await?;
    let t0 = Instant::now();
    let copied = copy_all(&c, srcs, dst, many, &o).await;
    // Files prepared for small uploads that the copy did not use go back now.
    c.release_prepared().await;
    let total = copied?;
    let secs = t0.elapsed().as_secs_f64();
    if total >= PROGRESS_BYTES_MIN {
        eprintln!(
            "copied {} bytes in {:.2} s ({:.1} MiB/s)",
            total,
            secs,
            total as f64 / (1 << 20) as f64 / secs.max(1e-9)
        );
    }
    Ok(())
}

/// Copies each of `srcs` to `dst`; returns the bytes copied.
async fn copy_all(
    c: &Arc<Client>,
    srcs: &[String],
    dst: &str,
    many: bool,
    o: &CopyOpts,
) -> anyhow::Result<u64> {
    let c = c.clone();
    let mut total = 0;
    let dst_remote = dst.starts_with("nasd:");
    for s in srcs {
        let src_remote = s.starts_with("nasd:");
        match (src_remote, dst_remote) {
            (false, true) => {
                let d = remote(dst)?;
                let src = Path::new(s);
                let target = remote_target(&c, &d, || upload_name(src), src.is_dir(), many).await?;
                total += upload_path(&c, src, &target, o).await?;
            }
            (true, false) => {
                let src = remote(s)?;
                // Whether the source is a directory matters only for a trailing slash that
                // names nothing yet.
                let is_dir = dst.ends_with('/')
                    && !Path::new(dst).exists()
                    && c.stat(&src).await?.kind == FileKind::Dir;
                let target = local_target(dst, remote_name(&src), is_dir, many)?;
                total += download_path(&c, &src, &target, o).await?;
            }
            (true, true) => {
                let (src, d) = (remote(s)?, remote(dst)?);
                let name = || Ok(remote_name(&src).to_string());
                let target = remote_target(&c, &d, name, false, many).await?;
                total += copy_remote(&c, &src, &target, o).await?;
            }
            (false, false) => bail!("{s} -> {dst}: one side must be a remote path (nasd:/path)"),
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(preserve: bool, umask: u32) -> CopyOpts {
        CopyOpts {
            recursive: false,
            preserve,
            umask,
        }
    }

    #[test]
    fn a_new_file_gets_the_source_bits_under_the_umask_and_never_special_bits() {
        assert_eq!(new_mode(0o600, &opts(false, 0o022)), 0o600);
        assert_eq!(new_mode(0o666, &opts(false, 0o022)), 0o644);
        assert_eq!(new_mode(0o777, &opts(false, 0o077)), 0o700);
        assert_eq!(new_mode(0o4755, &opts(false, 0o022)), 0o755);
        assert_eq!(new_mode(0o640, &opts(true, 0o077)), 0o640);
        assert_eq!(new_mode(0o2750, &opts(true, 0)), 0o750);
    }

    #[test]
    fn the_umask_is_read_without_changing_it() {
        let before = umask();
        assert_eq!(umask(), before);
        assert!(before <= 0o777);
    }

    #[test]
    fn a_trailing_slash_or_several_sources_need_a_local_directory() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, b"x").unwrap();
        let f = f.to_str().unwrap();
        let gone = format!("{d}/gone");
        assert_eq!(
            local_target(d, "n", false, false).unwrap(),
            dir.path().join("n")
        );
        assert_eq!(
            local_target(&format!("{d}/"), "n", false, true).unwrap(),
            dir.path().join("n")
        );
        assert_eq!(
            local_target(f, "n", false, false).unwrap(),
            PathBuf::from(f)
        );
        assert!(local_target(&format!("{f}/"), "n", false, false).is_err());
        assert!(local_target(&format!("{gone}/"), "n", false, false).is_err());
        assert!(local_target(&gone, "n", false, true).is_err());
        assert_eq!(
            local_target(&format!("{gone}/"), "n", true, false).unwrap(),
            PathBuf::from(format!("{gone}/"))
        );
    }
}
