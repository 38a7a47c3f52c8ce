//! Deterministic test data for what runs on a local cluster (the demo, the benches, the
//! lab): the same seed gives the same bytes, so a reader can check what a writer stored, and
//! xorshift output does not compress or deduplicate.

/// `n` bytes of xorshift64 output from `seed` (made odd, so no seed gives all zeros).
pub fn pseudo_random(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(n + 8);
    while v.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(n);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_bytes_and_others_differ() {
        assert_eq!(pseudo_random(1000, 7), pseudo_random(1000, 7));
        assert_ne!(pseudo_random(1000, 7), pseudo_random(1000, 9));
        assert_eq!(pseudo_random(13, 7).len(), 13);
        assert!(pseudo_random(4096, 0).iter().any(|&b| b != 0));
        // A prefix of a longer run: pieces of one stream line up.
        assert_eq!(pseudo_random(100, 5)[..], pseudo_random(200, 5)[..100]);
    }
}
