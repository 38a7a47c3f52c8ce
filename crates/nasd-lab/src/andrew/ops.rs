//! Single operations timed on each target, to explain the phases' times: what one stat,
//! one failed lookup (a compiler searching its include path), one small file written and
//! closed, one small file opened and read, and one mkdir cost through each mount.

use std::fs;
use std::io::{Read as _, Write as _};
use std::path::Path;
use std::time::Instant;

use crate::error::LabError;

/// The operations, as named in rows.
pub const OPS: [&str; 5] = ["stat", "lookup-missing", "create-4k", "read-4k", "mkdir"];
/// Repetitions of each operation (fewer for those that change the tree).
const REPEATS: [usize; 5] = [200, 200, 50, 100, 20];
/// Bytes of the small files.
const SMALL_FILE_BYTES: usize = 4096;

/// Microseconds per operation, in [`OPS`] order, measured in `dir` (made and removed here).
pub fn measure(dir: &Path) -> Result<[f64; 5], LabError> {
    let fail = |what: &str, e: std::io::Error| {
        LabError::Andrew(format!("{what} in {}: {e}", dir.display()))
    };
    fs::create_dir(dir).map_err(|e| fail("mkdir", e))?;
    let data = vec![0x5au8; SMALL_FILE_BYTES];
    let file = dir.join("f");
    fs::write(&file, &data).map_err(|e| fail("write", e))?;
    let mut us = [0.0; 5];
    let per = |t: Instant, n: usize| t.elapsed().as_secs_f64() * 1e6 / n as f64;

    let t = Instant::now();
    for _ in 0..REPEATS[0] {
        fs::symlink_metadata(&file).map_err(|e| fail("stat", e))?;
    }
    us[0] = per(t, REPEATS[0]);

    let missing = dir.join("missing.h");
    let t = Instant::now();
    for _ in 0..REPEATS[1] {
        if fs::symlink_metadata(&missing).is_ok() {
            return Err(LabError::Andrew(format!("{} exists", missing.display())));
        }
    }
    us[1] = per(t, REPEATS[1]);

    let t = Instant::now();
    for i in 0..REPEATS[2] {
        let mut f = fs::File::create(dir.join(format!("c{i}"))).map_err(|e| fail("create", e))?;
        f.write_all(&data).map_err(|e| fail("write", e))?;
    }
    us[2] = per(t, REPEATS[2]);

    let t = Instant::now();
    let mut buf = Vec::with_capacity(SMALL_FILE_BYTES);
    for _ in 0..REPEATS[3] {
        buf.clear();
        fs::File::open(&file)
            .and_then(|mut f| f.read_to_end(&mut buf))
            .map_err(|e| fail("read", e))?;
        if buf != data {
            return Err(LabError::Andrew(format!(
                "{} read back wrong",
                file.display()
            )));
        }
    }
    us[3] = per(t, REPEATS[3]);

    let t = Instant::now();
    for i in 0..REPEATS[4] {
        fs::create_dir(dir.join(format!("d{i}"))).map_err(|e| fail("mkdir", e))?;
    }
    us[4] = per(t, REPEATS[4]);

    fs::remove_dir_all(dir).map_err(|e| fail("removing", e))?;
    Ok(us)
}
