//! The manager and clients decode a file's layout from bytes a peer or the store hands them: the
//! decoder must refuse or accept any input, never panic, and what it accepts must be canonical
//! (re-encode to the same bytes and print as text that parses back to it), and its addressing
//! must not panic on any offset.
#![no_main]
use libfuzzer_sys::fuzz_target;
use nasd_ec::layout::Layout;

fuzz_target!(|b: &[u8]| {
    let Ok(layout) = Layout::decode(b) else {
        return;
    };
    assert_eq!(&layout.encode()[..], b);
    assert_eq!(layout.to_string().parse::<Layout>(), Ok(layout));
    let offset = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], 0, 0, 0]);
    for e in layout.map(offset, 3 * layout.group_bytes().unwrap_or(1)) {
        let _ = layout.locate(e.component, e.object_offset);
    }
    for c in 0..layout.components() {
        let _ = layout.component_len(c, offset);
    }
});
