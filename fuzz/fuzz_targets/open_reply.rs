//! The client opens whatever a hostile drive or network sends as a reply: it must refuse or
//! accept, never panic, whatever the header, args, trailer and data claim. The request side is
//! fixed (a `tree`-sized read under each protection level); the reply body is the input.
#![no_main]
use libfuzzer_sys::fuzz_target;
use nasd_client::wire::{open_reply, PendingRequest, ReplyFrame};
use nasd_crypto::Key;
use nasd_proto::{Nonce, OpCode, Protection, Region, Suite};

fuzz_target!(|b: &[u8]| {
    let Some((&sel, body)) = b.split_first() else {
        return;
    };
    let protection = [
        Protection::NONE,
        Protection::INTEGRITY_ARGS,
        Protection::INTEGRITY_DATA,
        Protection::PRIVACY_ARGS,
        Protection::PRIVACY_DATA,
    ][sel as usize % 5];
    let op = [OpCode::Read, OpCode::GetAttr, OpCode::Write][(sel as usize / 5) % 3];
    let req = PendingRequest {
        request_id: u64::from_le_bytes(body.get(1..9).and_then(|s| s.try_into().ok()).unwrap_or([0; 8])),
        nonce: Nonce { time_us: 1, random: 2 },
        op,
        protection,
        suite: if sel & 0x80 == 0 { Suite::Blake3 } else { Suite::Sha256 },
        key: Key::from_bytes([9; 32]),
        read_regions: vec![Region::new(3, 5000), Region::new(0, 1)],
        read_limit: if sel & 0x40 == 0 { Region::WHOLE } else { Region::new(0, 4000) },
    };
    let _ = open_reply(&req, ReplyFrame::from_body(body.to_vec()));
});
