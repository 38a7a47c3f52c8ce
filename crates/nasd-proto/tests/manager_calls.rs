//! One property test over every row of the manager's call table: an arbitrary request of each
//! call and an arbitrary reply of its type round-trip through their frames, and the decoders
//! stay total on those frames mutated (truncated, extended, bytes flipped) and on arbitrary
//! bodies under each tag. A new row without arbitrary values does not compile here.

mod manager_arb;

use manager_arb::{Arb, Gen};
use nasd_proto::manager::{calls, Call, MgrReply, MgrRequest, Refused, Reply};
use nasd_proto::DecodeError;

/// Checks one row with values from `g`.
fn row<C>(g: &mut Gen, tag: u8, name: &str)
where
    C: Call + Arb,
    C::Reply: Arb + PartialEq,
{
    assert_eq!((C::TAG, C::NAME), (tag, name));
    let call = C::arb(g);
    let req: MgrRequest = call.clone().into();
    assert_eq!((req.tag(), req.name()), (tag, name));
    let id = g.next();
    let b = req.encode(id);
    assert_eq!(b[15], tag);
    assert_eq!(MgrRequest::decode(&b), Ok((id, req)), "{name}: {call:?}");
    mutated(g, &b, MgrRequest::decode, |q| q.encode(id));

    let reply = C::Reply::arb(g);
    let r = reply.into_reply();
    let b = r.encode(id);
    let (rid, back) = MgrReply::decode(&b).unwrap_or_else(|e| panic!("{name}: {r:?}: {e}"));
    assert_eq!((rid, &back), (id, &r), "{name}");
    let typed = C::Reply::from_reply(back).expect("the reply of its call");
    assert_eq!(typed.into_reply(), r);
    mutated(g, &b, MgrReply::decode, |r| r.encode(id));
}

/// `MgrRequest::decode` or `MgrReply::decode`.
type Decoder<T> = fn(&[u8]) -> Result<(u64, T), DecodeError>;

/// Decodes mutations of the frame `b`: every decoder returns; a cut or extended frame is
/// refused; whatever a flipped frame decodes to encodes to a frame that decodes to it again.
fn mutated<T: PartialEq + std::fmt::Debug>(
    g: &mut Gen,
    b: &[u8],
    decode: Decoder<T>,
    encode: impl Fn(&T) -> Vec<u8>,
) {
    let cut = g.below(b.len() as u64) as usize;
    assert!(
        decode(&b[..cut]).is_err(),
        "a frame cut at {cut} is refused"
    );
    let mut long = b.to_vec();
    long.push(g.next() as u8);
    assert!(
        decode(&long).is_err(),
        "a frame with a byte more is refused"
    );
    for _ in 0..8 {
        let mut m = b.to_vec();
        for _ in 0..1 + g.below(3) {
            let at = g.below(m.len() as u64) as usize;
            m[at] = match g.below(3) {
                0 => m[at] ^ (1 << g.below(8)),
                1 => 0xff,
                _ => g.next() as u8,
            };
        }
        if let Ok((_, v)) = decode(&m) {
            let again = encode(&v);
            assert_eq!(decode(&again).map(|(_, w)| w), Ok(v));
        }
    }
    // An arbitrary body under this frame's header and tag.
    let mut body = b[..16].to_vec();
    body.extend((0..g.below(200)).map(|_| g.next() as u8));
    let _ = decode(&body);
}

/// The reply any call may get instead of its own: `Error`.
fn refusal(g: &mut Gen) {
    let r = MgrReply::Error(Refused::arb(g));
    let id = g.next();
    let b = r.encode(id);
    assert_eq!(MgrReply::decode(&b), Ok((id, r)));
    mutated(g, &b, MgrReply::decode, |r| r.encode(id));
}

macro_rules! every_row {
    ($($tag:literal $C:ident $name:literal => $R:ty;)*) => {
        fn every_row(g: &mut Gen) {
            $(row::<calls::$C>(g, $tag, $name);)*
            refusal(g);
        }
    };
}
nasd_proto::for_each_manager_call!(every_row);

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

    /// The seed is printed when a case fails.
    #[test]
    fn every_call_and_reply_round_trips_and_decodes_totally(seed in proptest::prelude::any::<u64>()) {
        every_row(&mut Gen::new(seed));
    }
}
