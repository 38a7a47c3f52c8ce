//! `nasd lab crypto`'s rows for nasd itself: the cost of seed 001's three writer
//! authentication schemes (§3.3; Tables 2-4) as this code pays them, per 64 KiB block, from
//! the functions the data path runs rather than from a generic primitive.
//!
//! What each side runs for one 64 KiB block written as one request and read back as one reply
//! (drive protocol 4, the `tree` integrity scheme, integrity-data requests, an encrypted file):
//!
//! | step | who | function |
//! |---|---|---|
//! | encipher / decipher | client | `nasd_e2e::block::BlockCipher` (HCTR2-AES-256) |
//! | the write's piece hashes (its MAC covers them; the drive recomputes and keeps them as leaves) | client and drive | `nasd_crypto::integrity::pieces::write_form` |
//! | the MT-EINT pin of the object's new tree top | client | `TreeTrack::apply_write` |
//! | a read reply's leaves against its proof | client | `tree::leaves` + `tree::subtree` |
//! | scheme 1: the write request's signature | client signs, drive verifies | `wsig::DataDigest` + `wsig::message` + Ed25519 |
//! | schemes 1 and 2: the version's record signature | writer signs, reader verifies, once per version | `WriterKey::sign_record` / `verify_record` |
//!
//! The drive's read cost is a MAC over the tree top (40 bytes), which is left out as the
//! seed leaves out its disk's read cost for schemes 1 and 2. Per-version costs are reported
//! apart: a version of many blocks pays them once.

use serde_json::json;

use crate::crypto::{measure, Budget, BLOCK_BYTES};
use crate::report::{fmt, Table};
use crate::stats::Summary;
use nasd_crypto::integrity::{pieces, track::TreeTrack, tree};
use nasd_crypto::{wsig, Cost};
use nasd_proto::{DriveId, Nonce, ObjectId, PartitionId, Region, Scheme, Suite};

/// Medians, in seconds, of what one block costs on this code.
#[derive(Debug, Clone, Copy)]
pub struct NasdCosts {
    pub encipher: f64,
    pub decipher: f64,
    pub write_form: f64,
    pub pin: f64,
    pub read_verify: f64,
    pub wsig_sign: f64,
    pub wsig_verify: f64,
    pub record_sign: f64,
    pub record_verify: f64,
}

impl NasdCosts {
    /// Per block, scheme `s`: read host, read disk, write host, write disk (seconds).
    pub fn per_block(&self, s: usize) -> [f64; 4] {
        let read_host = self.read_verify + self.decipher;
        let write_host = self.encipher + self.write_form + self.pin;
        let write_disk = self.write_form;
        match s {
            1 => [
                read_host,
                0.0,
                write_host + self.wsig_sign,
                write_disk + self.wsig_verify,
            ],
            _ => [read_host, 0.0, write_host, write_disk],
        }
    }

    /// Once per version, scheme `s`: read host (verify), write host (sign).
    pub fn per_version(&self, s: usize) -> (f64, f64) {
        match s {
            1 | 2 => (self.record_verify, self.record_sign),
            _ => (0.0, 0.0),
        }
    }
}

fn median(s: Summary) -> f64 {
    s.median
}

/// Measures the steps of the module docs on one 64 KiB block.
pub(crate) fn measure_nasd(budget: Budget) -> NasdCosts {
    let suite = Suite::Blake3;
    let data: Vec<u8> = (0..BLOCK_BYTES).map(|i| (i * 31 % 251) as u8).collect();
    let cipher = nasd_e2e::block::BlockCipher::new(
        nasd_e2e::FileId([9; 16]),
        &nasd_e2e::FileKey::from_bytes([3; 32]),
    );
    let mut buf = data.clone();
    let encipher = median(measure(budget, || {
        cipher.encrypt_in_place(5, 1, std::hint::black_box(&mut buf));
    }));
    let decipher = median(measure(budget, || {
        cipher.decrypt_in_place(5, 1, std::hint::black_box(&mut buf));
    }));
    let mut cost = Cost::default();
    let write_form = median(measure(budget, || {
        std::hint::black_box(pieces::write_form(
            suite,
            Scheme::Tree,
            0,
            std::hint::black_box(&data),
            &mut cost,
        ));
    }));
    let pin = median(measure(budget, || {
        let mut t = TreeTrack::empty(suite);
        t.apply_write(0, std::hint::black_box(&data), &mut cost);
        std::hint::black_box(t.top());
    }));
    let read_verify = median(measure(budget, || {
        let leaves = tree::leaves(suite, 0, std::hint::black_box(&data), &mut cost);
        std::hint::black_box(tree::subtree(suite, &leaves));
    }));
    let signer = wsig::WriterSigner::from_seed(&nasd_crypto::Key::from_bytes([7; 32]));
    let public = signer.public();
    let regions = [Region::new(0, BLOCK_BYTES as u64)];
    let place = wsig::Place {
        drive: DriveId(1),
        partition: PartitionId(1),
        object: ObjectId(16),
        nonce: Nonce {
            time_us: 1,
            random: 1,
        },
    };
    let form = pieces::write_form(suite, Scheme::Tree, 0, &data, &mut cost);
    let message = |cost: &mut Cost| {
        let mut d = wsig::DataDigest::new(suite, Scheme::Tree);
        d.region(&form, &data, cost);
        let change = wsig::Change::Write {
            form: Scheme::Tree,
            regions: &regions,
            data_digest: d.finish(cost),
        };
        wsig::message(&place, &change)
    };
    let wsig_sign = median(measure(budget, || {
        std::hint::black_box(signer.sign(&message(&mut cost)));
    }));
    let sig = signer.sign(&message(&mut cost));
    let wsig_verify = median(measure(budget, || {
        wsig::verify(&public, &message(&mut cost), &sig).expect("verifies");
    }));
    let writer = nasd_e2e::sign::WriterKey::from_seed(&[8; 32]);
    let record = nasd_e2e::TrustedRecord {
        scheme: nasd_e2e::Scheme::Mt,
        block_bytes: BLOCK_BYTES as u32,
        blocks: 16,
        length: 16 * BLOCK_BYTES as u64,
        key_version: 1,
        root: [4; 32],
        counters_digest: [5; 32],
        binding: Some(nasd_e2e::record::Binding {
            generation: 2,
            origin: nasd_e2e::FileId([9; 16]),
            keys_digest: [6; 32],
        }),
    };
    let file = nasd_e2e::FileId([9; 16]);
    let record_sign = median(measure(budget, || {
        std::hint::black_box(writer.sign_record(file, &record));
    }));
    let rsig = writer.sign_record(file, &record);
    let record_verify = median(measure(budget, || {
        writer
            .public()
            .verify_record(file, &record, &rsig)
            .expect("verifies");
    }));
    NasdCosts {
        encipher,
        decipher,
        write_form,
        pin,
        read_verify,
        wsig_sign,
        wsig_verify,
        record_sign,
        record_verify,
    }
}

/// The rows this module adds to Table `s + 1` (scheme `s`), in ms: per block, and per
/// version.
pub fn push_rows(t: &mut Table, s: usize, c: &NasdCosts) {
    let v = c.per_block(s).map(|x| x * 1e3);
    let d = |x: f64| if x < 1.0 { fmt(x, 3) } else { fmt(x, 2) };
    let ppc_write_host = crate::crypto::SEED_SCHEME_MS[s - 1][1][2];
    t.push(
        vec![
            "nasd (this code: HCTR2-AES-256, BLAKE3 tree, Ed25519), per block".into(),
            d(v[0]),
            d(v[1]),
            d(v[2]),
            d(v[3]),
            format!("{:.0}x", ppc_write_host / v[2]),
        ],
        json!({"table": (s + 1).to_string(), "algorithm": "nasd per block", "source": "nasd",
               "read_host_ms": v[0], "read_disk_ms": v[1], "write_host_ms": v[2], "write_disk_ms": v[3],
               "speedup_vs_ppc604_write_host": ppc_write_host / v[2]}),
    );
    let (rv, ws) = c.per_version(s);
    t.push(
        vec![
            "nasd, once per version (record signature)".into(),
            d(rv * 1e3),
            d(0.0),
            d(ws * 1e3),
            d(0.0),
            String::new(),
        ],
        json!({"table": (s + 1).to_string(), "algorithm": "nasd per version", "source": "nasd",
               "read_host_ms": rv * 1e3, "read_disk_ms": 0.0, "write_host_ms": ws * 1e3, "write_disk_ms": 0.0}),
    );
}

/// The measured steps themselves, in µs per 64 KiB block (or per operation).
pub fn steps_table(c: &NasdCosts) -> Table {
    let mut t = Table::new(
        "nasd_steps",
        "nasd's data path steps per 64 KiB block (signatures per request or per version), median",
        &["step", "us", "MB/s"],
    );
    let rows = [
        ("encipher (HCTR2-AES-256)", c.encipher, true),
        ("decipher (HCTR2-AES-256)", c.decipher, true),
        ("write form (tree pieces)", c.write_form, true),
        ("MT pin (TreeTrack)", c.pin, true),
        ("read reply leaves", c.read_verify, true),
        ("scheme 1 write signature", c.wsig_sign, false),
        ("scheme 1 drive verify", c.wsig_verify, false),
        ("record signature", c.record_sign, false),
        ("record verify", c.record_verify, false),
    ];
    for (name, secs, bulk) in rows {
        let mbs = if bulk {
            format!("{:.0}", BLOCK_BYTES as f64 / secs / 1e6)
        } else {
            String::new()
        };
        t.push(
            vec![name.into(), fmt(secs * 1e6, 1), mbs],
            json!({"table": "nasd_steps", "step": name, "us": secs * 1e6,
                   "mb_per_s": bulk.then(|| BLOCK_BYTES as f64 / secs / 1e6)}),
        );
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheme_composition_adds_signatures_only_where_the_seed_puts_them() {
        let c = NasdCosts {
            encipher: 1.0,
            decipher: 2.0,
            write_form: 4.0,
            pin: 8.0,
            read_verify: 16.0,
            wsig_sign: 32.0,
            wsig_verify: 64.0,
            record_sign: 128.0,
            record_verify: 256.0,
        };
        assert_eq!(c.per_block(1), [18.0, 0.0, 45.0, 68.0]);
        assert_eq!(c.per_block(2), [18.0, 0.0, 13.0, 4.0]);
        assert_eq!(c.per_block(3), c.per_block(2));
        assert_eq!(c.per_version(1), (256.0, 128.0));
        assert_eq!(c.per_version(2), (256.0, 128.0));
        assert_eq!(c.per_version(3), (0.0, 0.0));
    }

    #[test]
    fn every_step_is_measured_positive() {
        let c = measure_nasd(Budget {
            runs: 1,
            run_s: 0.001,
        });
        for x in [
            c.encipher,
            c.decipher,
            c.write_form,
            c.pin,
            c.read_verify,
            c.wsig_sign,
            c.wsig_verify,
            c.record_sign,
            c.record_verify,
        ] {
            assert!(x > 0.0 && x < 1.0, "{c:?}");
        }
    }
}
