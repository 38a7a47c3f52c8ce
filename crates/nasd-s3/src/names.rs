//! Buckets and keys as paths: a bucket is a directory directly under the gateway's root, a
//! key is a path inside it, its `/`s separating directories (made as needed by a write, so
//! `a/b/c` and `a/b/d` share the directory `a/b`). Every key is checked before it touches
//! the namespace: no empty, `.` or `..` segment (a key can never leave its bucket), no
//! control characters, no Unicode noncharacters (the gateway's own names use them), segments and paths within the manager's limits. A key ending in `/`
//! names a directory (the "folder" markers S3 consoles make).

use nasd_proto::manager::{NAME_BYTES_MAX, PATH_BYTES_MAX};
use s3s::{s3_error, S3Error};

/// Longest key S3 allows, in bytes.
pub const KEY_BYTES_MAX: usize = 1024;

/// Whether `name` is a bucket name as S3 defines them (3-63 characters of lower-case
/// letters, digits, `-` and `.`, starting and ending with a letter or digit, not an IP
/// address). s3s checks this too; the gateway checks again for names it builds paths from.
pub fn check_bucket(name: &str) -> Result<(), S3Error> {
    let ok = (3..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric()
        && !name.contains("..")
        && name.parse::<std::net::Ipv4Addr>().is_err();
    if ok {
        Ok(())
    } else {
        Err(s3_error!(
            InvalidBucketName,
            "{name:?} is not a valid bucket name"
        ))
    }
}

/// Checks the name of a bucket about to be made: [`check_bucket`]'s rules and S3's rule
/// that no dot is beside a dash (checked only when a bucket is made, so a bucket made before
/// the rule stays reachable).
pub fn check_new_bucket(name: &str) -> Result<(), S3Error> {
    check_bucket(name)?;
    if name.contains(".-") || name.contains("-.") {
        return Err(s3_error!(
            InvalidBucketName,
            "{name:?} is not a valid bucket name: a dot beside a dash"
        ));
    }
    Ok(())
}

/// Checks `key` and splits it into its directory segments and whether it names a directory
/// (ends in `/`).
pub fn key_segments(key: &str) -> Result<(Vec<&str>, bool), S3Error> {
    if key.is_empty() {
        return Err(invalid_key("the key is empty"));
    }
    if key.len() > KEY_BYTES_MAX {
        return Err(s3_error!(KeyTooLongError));
    }
    if key.chars().any(char::is_control) {
        return Err(invalid_key("the key holds a control character"));
    }
    if key.chars().any(noncharacter) {
        return Err(invalid_key(
            "the key holds a Unicode noncharacter, which the gateway reserves",
        ));
    }
    let dir = key.ends_with('/');
    let body = key.strip_suffix('/').unwrap_or(key);
    let segs: Vec<&str> = body.split('/').collect();
    for s in &segs {
        if s.is_empty() || *s == "." || *s == ".." {
            return Err(invalid_key("the key has an empty, `.` or `..` segment"));
        }
        if s.len() > NAME_BYTES_MAX {
            return Err(invalid_key("a segment of the key is longer than 255 bytes"));
        }
    }
    Ok((segs, dir))
}

/// Unicode's noncharacters (U+FDD0..U+FDEF and the last two of every plane), kept for a
/// program's internal use: the gateway's names for what is not a key use them.
fn noncharacter(c: char) -> bool {
    let n = c as u32;
    (0xfdd0..=0xfdef).contains(&n) || n & 0xfffe == 0xfffe
}

fn invalid_key(why: &str) -> S3Error {
    s3_error!(InvalidArgument, "invalid object key: {why}")
}

/// Where buckets live, and the paths of buckets and keys.
#[derive(Clone, Debug)]
pub struct Names {
    /// The root directory, without a trailing `/` (`""` for the namespace's root).
    root: String,
}

impl Names {
    pub fn new(root: &str) -> Names {
        Names {
            root: root.trim_end_matches('/').to_string(),
        }
    }

    /// The root directory's path.
    pub fn root(&self) -> String {
        if self.root.is_empty() {
            "/".into()
        } else {
            self.root.clone()
        }
    }

    /// The directory of bucket `b` (checked).
    pub fn bucket(&self, b: &str) -> Result<String, S3Error> {
        check_bucket(b)?;
        Ok(format!("{}/{b}", self.root))
    }

    /// The path of `key` in bucket `b`, and whether it names a directory.
    pub fn key(&self, b: &str, key: &str) -> Result<(String, bool), S3Error> {
        let bucket = self.bucket(b)?;
        let (segs, dir) = key_segments(key)?;
        let path = format!("{bucket}/{}", segs.join("/"));
        if path.len() > PATH_BYTES_MAX {
            return Err(s3_error!(KeyTooLongError));
        }
        Ok((path, dir))
    }

    /// The directories between bucket `b` and the file `key` names, outermost first.
    pub fn parents(&self, b: &str, key: &str) -> Result<Vec<String>, S3Error> {
        let bucket = self.bucket(b)?;
        let (segs, dir) = key_segments(key)?;
        let n = if dir { segs.len() } else { segs.len() - 1 };
        Ok((1..=n)
            .map(|k| format!("{bucket}/{}", segs[..k].join("/")))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_to_paths_inside_their_bucket() {
        let n = Names::new("/s3/");
        assert_eq!(n.bucket("photos").unwrap(), "/s3/photos");
        assert_eq!(
            n.key("photos", "2024/a b/ü.jpg").unwrap(),
            ("/s3/photos/2024/a b/ü.jpg".to_string(), false)
        );
        assert_eq!(
            n.key("photos", "dir/").unwrap(),
            ("/s3/photos/dir".to_string(), true)
        );
        assert_eq!(
            n.parents("photos", "a/b/c").unwrap(),
            vec!["/s3/photos/a", "/s3/photos/a/b"]
        );
        assert_eq!(n.parents("photos", "a/b/").unwrap().len(), 2);
        assert_eq!(Names::new("/").key("b12", "k").unwrap().0, "/b12/k");
    }

    #[test]
    fn new_buckets_have_no_dot_beside_a_dash() {
        for bad in ["a.-b", "a-.b", "ab", "Ab1", "a..b", "-ab", "192.168.1.1"] {
            assert!(check_new_bucket(bad).is_err(), "{bad}");
        }
        for good in ["a.b-c", "abc", "a-b.c1"] {
            assert!(check_new_bucket(good).is_ok(), "{good}");
        }
        assert!(
            check_bucket("a.-b").is_ok(),
            "an old bucket stays reachable"
        );
    }

    #[test]
    fn keys_that_could_leave_their_bucket_are_refused() {
        let n = Names::new("/");
        for k in [
            "../etc/passwd",
            "a/../../b",
            "./a",
            "a//b",
            "/a",
            "",
            "a/./b",
            "a\u{0}b",
            "a\nb",
            "..",
            "a\u{fdd0}v",
            "a\u{ffff}",
            "a\u{10fffe}",
        ] {
            assert!(n.key("bucket", k).is_err(), "{k:?} accepted");
        }
        assert!(n.key("bucket", &"x".repeat(1025)).is_err());
        assert!(n.key("bucket", &"x".repeat(256)).is_err());
        assert!(n.key("bucket", &format!("{}/y", "x".repeat(255))).is_ok());
    }

    #[test]
    fn bucket_names_follow_s3_rules() {
        for b in ["abc", "my-bucket.2", "a".repeat(63).as_str()] {
            assert!(check_bucket(b).is_ok(), "{b}");
        }
        for b in [
            "ab",
            "ABC",
            "-abc",
            "abc-",
            "a..b",
            "192.168.1.1",
            "a_b",
            "a/b",
            "..",
            &"a".repeat(64),
        ] {
            assert!(check_bucket(b).is_err(), "{b}");
        }
    }
}
