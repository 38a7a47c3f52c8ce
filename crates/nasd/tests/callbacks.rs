//! AFS callbacks and attribute reads from drives against a real cluster (seed 002 §3, §3.2;
//! issue 11 §4): a store does not complete before every other client holding a callback on the
//! file was told, a told client drops what it cached, a hung holder holds a writer up only
//! briefly, and a stat under a cached capability costs no manager round trip.

mod common;

use common::Up;
use nasd_client::files::Client;
use nasd_client::session::{Session, SessionConfig};
use nasd_proto::manager::calls;
use nasd_proto::manager::{Credential, MgrReply, MgrRequest};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn admin(up: &Up) -> Arc<Client> {
    Client::connect(up.session("admin", up.admin_password().trim()))
        .await
        .unwrap()
}

/// Waits (bounded) until `c`'s callback channel polls.
async fn channel_up(c: &Client) {
    for _ in 0..500 {
        if c.callbacks.live(now_ms()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the callback channel never came up");
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn trips(c: &Client) -> u64 {
    c.manager_round_trips.load(Ordering::Relaxed)
}

#[test]
fn a_store_completes_only_after_the_holders_break_and_they_see_it() {
    let up = Up::start(1);
    let rt = rt();
    rt.block_on(async {
        let writer = admin(&up).await;
        let reader = admin(&up).await;
        writer.put_bytes("/f", b"one", 0o644).await.unwrap();
        reader.enable_callbacks();
        channel_up(&reader).await;

        // Cached under the callback: the second stat and read cost no manager round trip.
        assert_eq!(reader.stat("/f").await.unwrap().size, 3);
        assert_eq!(reader.get_bytes("/f").await.unwrap(), b"one");
        let before = trips(&reader);
        assert_eq!(reader.stat("/f").await.unwrap().size, 3);
        assert_eq!(
            reader.lstat("/f").await.unwrap().size,
            3,
            "lstat: fetched once"
        );
        assert_eq!(reader.lstat("/f").await.unwrap().size, 3);
        assert_eq!(reader.get_bytes("/f").await.unwrap(), b"one");
        assert_eq!(trips(&reader), before + 1, "only the first lstat asked");

        // The writer's commit returns only once the reader's break was applied.
        let broken = reader.callbacks.breaks.load(Ordering::Acquire);
        writer.put_bytes("/f", b"two!", 0o644).await.unwrap();
        assert!(
            reader.callbacks.breaks.load(Ordering::Acquire) > broken,
            "the store completed before the holder was told"
        );
        assert_eq!(reader.stat("/f").await.unwrap().size, 4);
        assert_eq!(reader.get_bytes("/f").await.unwrap(), b"two!");

        // Attribute and name changes break too.
        reader.stat("/f").await.unwrap();
        writer.chmod("/f", 0o600).await.unwrap();
        assert_eq!(reader.stat("/f").await.unwrap().mode & 0o777, 0o600);
        reader.lstat("/f").await.unwrap();
        writer.rename("/f", "/g").await.unwrap();
        assert!(reader.lstat("/f").await.is_err(), "a renamed name is gone");
        assert_eq!(reader.lstat("/g").await.unwrap().size, 4);
        writer.mkdir("/d", 0o755).await.unwrap();
        reader.put_bytes("/d/x", b"x", 0o644).await.unwrap();
        assert_eq!(reader.lstat("/d/x").await.unwrap().size, 1);
        writer.rename("/d", "/e").await.unwrap();
        assert!(
            reader.lstat("/d/x").await.is_err(),
            "a path through a renamed directory is gone"
        );
        assert_eq!(reader.lstat("/e/x").await.unwrap().size, 1);
    });
}

#[test]
fn a_holder_that_never_acknowledges_holds_a_store_up_only_briefly() {
    let up = Up::start(1);
    let rt = rt();
    rt.block_on(async {
        let writer = admin(&up).await;
        writer.put_bytes("/f", b"one", 0o644).await.unwrap();
        // A hung client: a channel that polls once, takes its break and never polls again.
        let cfg: SessionConfig = up.session("admin", up.admin_password().trim());
        let mut channel = Session::connect(&cfg).await.unwrap();
        let token = channel.token;
        let poll = |acked, wait_ms| MgrRequest::WaitBreaks(calls::WaitBreaks { acked, wait_ms });
        let r = channel.request(&poll(0, 0)).await.unwrap();
        assert_eq!(r, MgrReply::Breaks(vec![]));
        let mut other = Session::connect(&SessionConfig {
            credential: Credential::Token(token),
            ..cfg.clone()
        })
        .await
        .unwrap();
        let MgrReply::Stat(st) = other
            .request(&MgrRequest::Stat(calls::Stat { path: "/f".into() }))
            .await
            .unwrap()
        else {
            panic!("stat")
        };
        let told = Arc::new(AtomicBool::new(false));
        let told2 = told.clone();
        let hung = tokio::spawn(async move {
            let r = channel.request(&poll(0, 20_000)).await.unwrap();
            told2.store(true, Ordering::Release);
            (r, channel)
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let t0 = std::time::Instant::now();
        writer.put_bytes("/f", b"two", 0o644).await.unwrap();
        let waited = t0.elapsed();
        assert!(
            told.load(Ordering::Acquire),
            "the store completed before the holder was told"
        );
        let (r, _channel) = hung.await.unwrap();
        let MgrReply::Breaks(b) = r else {
            panic!("{r:?}")
        };
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].ino, st.ino);
        // Not acknowledged: the store waited for the channel to go quiet, not forever.
        assert!(
            waited >= Duration::from_millis(500),
            "the store did not wait for an unacknowledged break ({waited:?})"
        );
        assert!(waited < Duration::from_secs(10), "{waited:?}");
    });
}

#[test]
fn a_stat_under_a_cached_capability_reads_the_drive_not_the_manager() {
    let up = Up::start(1);
    let rt = rt();
    rt.block_on(async {
        let a = admin(&up).await;
        let b = admin(&up).await;
        a.put_bytes("/f", b"hello", 0o640).await.unwrap();
        assert_eq!(b.get_bytes("/f").await.unwrap(), b"hello");
        let before = trips(&b);
        let st = b.stat("/f").await.unwrap();
        assert_eq!((st.size, st.mode & 0o777), (5, 0o640));
        b.stat("/f").await.unwrap();
        assert_eq!(trips(&b), before, "a stat went to the manager");
        // The drive's attributes are current: a change elsewhere shows (here through a
        // revoked capability and one manager round trip).
        a.put_bytes("/f", b"hello, world", 0o640).await.unwrap();
        assert_eq!(b.stat("/f").await.unwrap().size, 12);
        // Under a fresh capability, a change that revokes nothing is read from the drive.
        assert_eq!(b.get_bytes("/f").await.unwrap(), b"hello, world");
        let before = trips(&b);
        a.utimes("/f", 1_000_000).await.unwrap();
        assert_eq!(b.stat("/f").await.unwrap().mtime_us, 1_000_000);
        assert_eq!(trips(&b), before);
        a.chmod("/f", 0o600).await.unwrap();
        assert_eq!(b.stat("/f").await.unwrap().mode & 0o777, 0o600);
    });
}
