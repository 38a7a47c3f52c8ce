//! Every decoder a drive runs on untrusted bytes must be total: this target feeds arbitrary
//! bytes to the frame check, the request and reply envelopes and every operation's arguments.
#![no_main]
use libfuzzer_sys::fuzz_target;
use nasd_proto::*;

fuzz_target!(|b: &[u8]| {
    let _ = check_frame(b);
    let _ = Hello::decode(b);
    let _ = Welcome::decode(b);
    let _ = ReplyHeader::decode(b);
    if let Ok((h, at)) = RequestHeader::decode(b) {
        assert!(at <= b.len());
        if let Ok(op) = Op::decode_args(h.op, &h.args) {
            // A write's args, its optional writer signature (protocol 4) last, are canonical:
            // what decodes re-encodes to the same bytes.
            if let Op::Write { .. } = op {
                assert_eq!(op.encode_args(), h.args);
            }
            let _ = op.changes_data();
        }
        let _ = RequestHeader::mac_input_of(b);
        if let CapField::Plain(c) = &h.cap {
            // capability args, with or without a writer key, round-trip their encoding
            assert_eq!(CapabilityArgs::decode(&c.encode()).as_ref(), Ok(c));
        }
    }
    for code in OpCode::ALL {
        let _ = Op::decode_args(*code, b);
        let _ = ReplyBody::decode(*code, b);
    }
    let _ = Attributes::decode(b);
    let _ = CapabilityArgs::decode(b);
    let _ = DriveInfo::decode(b);
});
