//! POSIX names against a real cluster (manager protocol 7, store schema 6): symbolic links
//! resolved by the manager and copied as links by `cp -r` both ways, special files skipped
//! with a reason, hard links counted and kept until their last name goes, link loops refused,
//! and another user's file not linkable.

mod common;
use common::*;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A local tree with links of every kind and a FIFO.
fn tree(root: &Path) {
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::write(root.join("a.txt"), b"alpha\n").unwrap();
    std::fs::write(root.join("sub/b.bin"), vec![7u8; 70_000]).unwrap();
    symlink("a.txt", root.join("rel")).unwrap();
    symlink("../a.txt", root.join("sub/up")).unwrap();
    symlink("sub", root.join("sublink")).unwrap();
    symlink("/no/such/place", root.join("dangling")).unwrap();
    let fifo = std::ffi::CString::new(s(&root.join("pipe"))).unwrap();
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
}

#[test]
fn a_tree_with_symbolic_links_round_trips_through_cp_r() {
    let up = Up::start(1);
    let src = up.dir.path().join("src");
    tree(&src);
    let o = up.nasd(&["cp", "-r", s(&src), "nasd:/t"], &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("pipe") && err.contains("FIFO"),
        "the skip says what and why: {err}"
    );
    // The manager follows links: relative, up a level, to a directory.
    assert_eq!(up.ok(&["cat", "nasd:/t/rel"]), "alpha\n");
    assert_eq!(up.ok(&["cat", "nasd:/t/sub/up"]), "alpha\n");
    assert!(up.ok(&["ls", "nasd:/t/sublink"]).contains("b.bin"));
    assert_eq!(
        up.ok(&["cat", "nasd:/t/sublink/up"]),
        "alpha\n",
        "a link inside a path reached through a link"
    );
    assert!(up
        .fails(&["cat", "nasd:/t/dangling"], &[])
        .contains("no such file"));
    let ls = up.ok(&["ls", "-l", "nasd:/t"]);
    assert!(ls.contains("rel -> a.txt"), "{ls}");
    assert!(ls.contains("dangling -> /no/such/place"), "{ls}");
    assert!(ls.lines().any(|l| l.starts_with('l')), "{ls}");
    assert!(!ls.contains("pipe"), "{ls}");
    let json = up.ok(&["ls", "--json", "nasd:/t"]);
    let rel: serde_json::Value = json
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["name"] == "rel")
        .unwrap();
    assert_eq!(
        (rel["kind"].as_str(), rel["target"].as_str()),
        (Some("symlink"), Some("a.txt"))
    );
    assert_eq!(rel["size"], 5, "a link's size is its target's length");

    // Back down: links come back as links, with their targets as written.
    let back = up.dir.path().join("back");
    up.ok(&["cp", "-r", "nasd:/t", s(&back)]);
    for (link, target) in [
        ("rel", "a.txt"),
        ("sub/up", "../a.txt"),
        ("sublink", "sub"),
        ("dangling", "/no/such/place"),
    ] {
        assert_eq!(
            std::fs::read_link(back.join(link)).unwrap(),
            Path::new(target),
            "{link}"
        );
    }
    assert_eq!(std::fs::read(back.join("a.txt")).unwrap(), b"alpha\n");
    assert_eq!(
        std::fs::read(back.join("sub/b.bin")).unwrap(),
        vec![7u8; 70_000]
    );
    // Copying again finds the same links and leaves them.
    up.ok(&["cp", "-r", s(&src), "nasd:/t"]);
    up.ok(&["cp", "-r", "nasd:/t", s(&back)]);
    // Without -r a link on the command line is followed, as GNU cp does.
    up.ok(&["cp", s(&src.join("rel")), "nasd:/followed"]);
    assert_eq!(up.ok(&["cat", "nasd:/followed"]), "alpha\n");
    let st = up.ok(&["stat", "nasd:/followed"]);
    assert!(st.contains("kind  file"), "{st}");
    // rm removes the link, not what it names.
    up.ok(&["rm", "nasd:/t/sublink"]);
    assert!(up.ok(&["ls", "nasd:/t/sub"]).contains("b.bin"));
}

#[test]
fn links_loops_and_hard_links() {
    let up = Up::start(1);
    up.ok(&["mkdir", "nasd:/d"]);
    let f = up.dir.path().join("f");
    std::fs::write(&f, b"shared body").unwrap();
    up.ok(&["cp", s(&f), "nasd:/d/a"]);
    up.ok(&["ln", "nasd:/d/a", "nasd:/d/b"]);
    up.ok(&["mkdir", "nasd:/e"]);
    up.ok(&["ln", "nasd:/d/a", "nasd:/e"]);
    let links = |p: &str| -> u64 {
        let v: serde_json::Value =
            serde_json::from_str(up.ok(&["stat", "--json", p]).trim()).unwrap();
        v["nlink"].as_u64().unwrap()
    };
    assert_eq!(links("nasd:/d/a"), 3);
    assert_eq!(links("nasd:/e/a"), 3);
    assert_eq!(links("nasd:/d"), 2, "a directory without subdirectories");
    up.ok(&["mkdir", "nasd:/d/sub"]);
    assert_eq!(links("nasd:/d"), 3, "plus the subdirectory's ..");
    // An overwrite through one name is seen through the others (one inode).
    std::fs::write(&f, b"new body").unwrap();
    up.ok(&["cp", s(&f), "nasd:/d/b"]);
    assert_eq!(up.ok(&["cat", "nasd:/e/a"]), "new body");
    // The body stays until the last name goes.
    up.ok(&["rm", "nasd:/d/a"]);
    // POSIX: renaming one name of a file over another name of it does nothing.
    up.ok(&["mv", "nasd:/d/b", "nasd:/e/a"]);
    assert_eq!(links("nasd:/e/a"), 2);
    up.ok(&["rm", "nasd:/d/b"]);
    assert_eq!(links("nasd:/e/a"), 1);
    assert_eq!(up.ok(&["cat", "nasd:/e/a"]), "new body");
    up.ok(&["rm", "nasd:/e/a"]);
    assert!(up
        .fails(&["cat", "nasd:/e/a"], &[])
        .contains("no such file"));
    // Directories get no hard links.
    assert!(up
        .fails(&["ln", "nasd:/d/sub", "nasd:/d/sub2"], &[])
        .contains("permission denied"));

    // Loops and long chains are refused, not followed forever.
    up.ok(&["ln", "-s", "loop2", "nasd:/d/loop1"]);
    up.ok(&["ln", "-s", "loop1", "nasd:/d/loop2"]);
    assert!(up
        .fails(&["cat", "nasd:/d/loop1"], &[])
        .contains("too many levels of symbolic links"));
    up.ok(&["ln", "-s", "/", "nasd:/d/root"]);
    let deep = format!("nasd:/d{}", "/root/d".repeat(20));
    assert!(up.ok(&["ls", &deep]).contains("loop1"), "20 hops are fine");
    let deeper = format!("nasd:/d{}", "/root/d".repeat(41));
    assert!(up
        .fails(&["ls", &deeper], &[])
        .contains("too many levels of symbolic links"));

    // Another user may not pin a file they cannot read and write under a name of theirs.
    up.add_user("bob", "bob-pw");
    let bob = [("NASD_USER", "bob"), ("NASD_PASSWORD", "bob-pw")];
    up.ok(&["mkdir", "nasd:/pub"]);
    up.ok(&["chmod", "1777", "nasd:/pub"]);
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    up.ok(&["cp", s(&f), "nasd:/d/private"]);
    assert!(up
        .fails(&["ln", "nasd:/d/private", "nasd:/pub/mine"], &bob)
        .contains("permission denied"));
    // A link to it does not open it either.
    up.nasd(&["ln", "-s", "/d/private", "nasd:/pub/peek"], &bob);
    assert!(up
        .fails(&["cat", "nasd:/pub/peek"], &bob)
        .contains("permission denied"));
}

/// A download onto an existing special file (`/dev/null`, a FIFO) writes through it in
/// order and never renames a regular file over it.
#[test]
fn cp_onto_a_fifo_streams_in_order_and_keeps_the_fifo() {
    use std::os::unix::fs::FileTypeExt;
    let up = Up::start(1);
    // Several transfer pieces, fetched in parallel, so order matters.
    let body = rand_bytes(40 << 20, 7);
    let f = up.dir.path().join("f");
    std::fs::write(&f, &body).unwrap();
    up.ok(&["cp", s(&f), "nasd:/f"]);
    let pipe = up.dir.path().join("pipe");
    let c = std::ffi::CString::new(s(&pipe)).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let reader = {
        let pipe = pipe.clone();
        std::thread::spawn(move || std::fs::read(pipe).unwrap())
    };
    up.ok(&["cp", "nasd:/f", s(&pipe)]);
    // Checked before joining: a FIFO renamed over would leave the reader waiting.
    assert!(std::fs::symlink_metadata(&pipe)
        .unwrap()
        .file_type()
        .is_fifo());
    let got = reader.join().unwrap();
    assert!(
        got == body,
        "{} bytes through the FIFO, in order",
        got.len()
    );
    // And /dev/null stays the device.
    up.ok(&["cp", "nasd:/f", "/dev/null"]);
    assert!(std::fs::metadata("/dev/null")
        .unwrap()
        .file_type()
        .is_char_device());
}
