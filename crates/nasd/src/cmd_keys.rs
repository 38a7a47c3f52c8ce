//! `nasd user fingerprint`, `verify`, `reset-keys` and `key-log`: checking other users' keys
//! out of band, an admin's reset of a user who lost every key, and the key log's head to
//! compare between clients (issue 21 §4; `nasd_client::e2e::keylog`).

use nasd_client::files::Client;
use std::sync::Arc;

/// Prints `name`'s fingerprint, whether this host verified it, and the log's head.
pub async fn fingerprint(c: &Arc<Client>, name: &str, json: bool) -> anyhow::Result<()> {
    let f = c.user_fingerprint(name).await?;
    let root = hex::encode(f.log_root);
    if json {
        println!(
            "{}",
            serde_json::json!({
                "name": name, "uid": f.uid, "fingerprint": f.fingerprint.to_string(),
                "key_version": f.version, "after_reset": f.after_reset, "verified": f.verified,
                "log_size": f.log_size, "log_root": root,
            })
        );
        return Ok(());
    }
    let state = match (f.verified, f.after_reset) {
        (true, _) => "verified on this host",
        (false, true) => "NOT verified, and the keys were reset: files are not wrapped to them until `nasd user verify`",
        (false, false) => "not verified (taken from the key log at first sight)",
    };
    println!("{name} (uid {}): {}", f.uid, f.fingerprint);
    println!("  keys version {}; {state}", f.version);
    println!("key log: {} entries, root {root}", f.log_size);
    Ok(())
}

/// Records `name`'s fingerprint as checked, when it is the one the key log shows.
pub async fn verify(c: &Arc<Client>, name: &str, fingerprint: &str) -> anyhow::Result<()> {
    let fp = fingerprint
        .parse()
        .map_err(|e: String| anyhow::anyhow!("{fingerprint}: {e}"))?;
    c.verify_user(name, fp).await?;
    println!("{name}: fingerprint {fp} matches the key log; verified on this host");
    Ok(())
}

/// Clears `name`'s keys with a reset every client sees (admins).
pub async fn reset_keys(c: &Arc<Client>, name: &str) -> anyhow::Result<()> {
    c.reset_user_keys(name).await?;
    println!(
        "keys of {name} reset (logged): their next login makes new ones, which other users' \
         clients use once they verify them (nasd user fingerprint / verify)"
    );
    Ok(())
}

/// Prints the key log's head as this client holds it, or its root at `at` entries, for two
/// clients to compare.
pub async fn key_log(c: &Arc<Client>, at: Option<u64>) -> anyhow::Result<()> {
    let (size, root) = c.key_log_root(at).await?;
    println!("key log: {size} entries, root {}", hex::encode(root));
    Ok(())
}
