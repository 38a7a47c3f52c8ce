//! The client's verifier runs on what a hostile drive sends: a read reply body, its data and
//! trailer. It must return an error, never panic, whatever the regions, sizes and proofs claim.
#![no_main]
use libfuzzer_sys::fuzz_target;
use nasd_crypto::{Cost, Key, Mac};
use nasd_proto::{OpCode, Region, ReplyBody, Suite};

fuzz_target!(|b: &[u8]| {
    if b.len() < 2 {
        return;
    }
    let split = (b[0] as usize * 7) % b.len();
    let (body, data) = b[1..].split_at(split.min(b.len() - 1));
    if let Ok(ReplyBody::Read(rr)) = ReplyBody::decode(OpCode::Read, body) {
        for suite in [Suite::Blake3, Suite::Sha256] {
            let mac = Mac::new(suite, &Key::from_bytes([0; 32]));
            // Both a whole-object capability and one cut inside the reply's regions.
            for limit in [Region::WHOLE, Region::new(b[0] as u64 * 31, 1500)] {
                let _ = nasd_crypto::integrity::verify::feed_read(
                    &mut mac.clone(),
                    suite,
                    &rr,
                    data,
                    limit,
                    &mut Cost::default(),
                );
            }
        }
    }
});
