//! SHA-256 (FIPS 180-4) for the fingerprints, written for what they are:
//! short messages, hashed one after another in wasm, where the `sha2`
//! crate's portable code (an emulation of the x86 SHA extensions) is the
//! slowest part of a decision. Checked against the NIST vectors and `sha2`.

pub(crate) const K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
    0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
    0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
    0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2,
];

pub(crate) const INITIAL: [u32; 8] =
    [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];

/// The 64 rounds with constant indexes, eight at a time: each round names the
/// eight working words in its own rotation, so none is moved between rounds.
/// `$round` is the caller's round (scalar or four lanes at once).
macro_rules! sixty_four_rounds {
    ($round:ident; $a:ident, $b:ident, $c:ident, $d:ident, $e:ident, $f:ident, $g:ident, $h:ident) => {
        sixty_four_rounds!(@eight $round; $a, $b, $c, $d, $e, $f, $g, $h; 0 8 16 24 32 40 48 56);
    };
    (@eight $round:ident; $a:ident, $b:ident, $c:ident, $d:ident, $e:ident, $f:ident, $g:ident, $h:ident; $($base:literal)+) => {
        $(
            $round!($a, $b, $c, $d, $e, $f, $g, $h, $base);
            $round!($h, $a, $b, $c, $d, $e, $f, $g, $base + 1);
            $round!($g, $h, $a, $b, $c, $d, $e, $f, $base + 2);
            $round!($f, $g, $h, $a, $b, $c, $d, $e, $base + 3);
            $round!($e, $f, $g, $h, $a, $b, $c, $d, $base + 4);
            $round!($d, $e, $f, $g, $h, $a, $b, $c, $base + 5);
            $round!($c, $d, $e, $f, $g, $h, $a, $b, $base + 6);
            $round!($b, $c, $d, $e, $f, $g, $h, $a, $base + 7);
        )+
    };
}

/// One 64-byte block into `state`. Every index is a constant (the rounds are
/// written out by macro), so the 16-word schedule and the eight working
/// words stay in wasm locals instead of round trips through linear memory,
/// and no round shuffles the eight words: each names them in its own order.
fn compress(state: &mut [u32; 8], block: &[u8; 64]) {
    let mut w = [0u32; 16];
    for (i, word) in block.chunks_exact(4).enumerate() {
        w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
    }
    let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut h] = *state;
    macro_rules! round {
        ($a:ident, $b:ident, $c:ident, $d:ident, $e:ident, $f:ident, $g:ident, $h:ident, $i:expr) => {
            if $i >= 16 {
                let (w1, w14) = (w[($i + 1) & 15], w[($i + 14) & 15]);
                let s0 = w1.rotate_right(7) ^ w1.rotate_right(18) ^ (w1 >> 3);
                let s1 = w14.rotate_right(17) ^ w14.rotate_right(19) ^ (w14 >> 10);
                w[$i & 15] = w[$i & 15].wrapping_add(s0).wrapping_add(w[($i + 9) & 15]).wrapping_add(s1);
            }
            let s1 = $e.rotate_right(6) ^ $e.rotate_right(11) ^ $e.rotate_right(25);
            let choice = $g ^ ($e & ($f ^ $g));
            let t1 = $h.wrapping_add(s1).wrapping_add(choice).wrapping_add(K[$i]).wrapping_add(w[$i & 15]);
            let s0 = $a.rotate_right(2) ^ $a.rotate_right(13) ^ $a.rotate_right(22);
            let majority = ($a & $b) | ($c & ($a | $b));
            $d = $d.wrapping_add(t1);
            $h = t1.wrapping_add(s0).wrapping_add(majority);
        };
    }
    sixty_four_rounds!(round; a, b, c, d, e, f, g, h);
    for (s, v) in state.iter_mut().zip([a, b, c, d, e, f, g, h]) {
        *s = s.wrapping_add(v);
    }
}

/// The SHA-256 digest of `message`.
pub fn digest(message: &[u8]) -> [u8; 32] {
    let mut state = INITIAL;
    let mut blocks = message.chunks_exact(64);
    for block in &mut blocks {
        compress(&mut state, block.try_into().unwrap_or(&[0; 64]));
    }
    // The rest, the 0x80 byte, zeros, and the length in bits: one block or two.
    let rest = blocks.remainder();
    let mut tail = [0u8; 128];
    tail[..rest.len()].copy_from_slice(rest);
    tail[rest.len()] = 0x80;
    let end = if rest.len() < 56 { 64 } else { 128 };
    tail[end - 8..end].copy_from_slice(&((message.len() as u64) * 8).to_be_bytes());
    compress(&mut state, tail[..64].try_into().unwrap_or(&[0; 64]));
    if end == 128 {
        compress(&mut state, tail[64..].try_into().unwrap_or(&[0; 64]));
    }
    let mut out = [0u8; 32];
    for (bytes, word) in out.chunks_exact_mut(4).zip(state) {
        bytes.copy_from_slice(&word.to_be_bytes());
    }
    out
}

/// The digests of up to four messages: on wasm, hashed side by side, one
/// message per lane of 128-bit SIMD (a round costs about what it costs for one
/// message, and the rounds of one message cannot run in parallel); elsewhere
/// one after another. Lanes past `messages.len()` are not hashed.
pub fn digest_up_to_four(messages: &[&[u8]], out: &mut [[u8; 32]; 4]) {
    #[cfg(target_arch = "wasm32")]
    {
        // Every engine the package supports runs wasm SIMD.
        if messages.len() > 1 {
            return lanes::digest4(messages, out);
        }
    }
    for (message, digest_out) in messages.iter().zip(out.iter_mut()) {
        *digest_out = digest(message);
    }
}

/// Block `k` of a message padded (its own blocks, then the rest, the 0x80
/// byte, zeros and the length in bits: one block or two); `None` past the
/// last. `tail` keeps the padded rest between calls, from `k` in order.
#[cfg(target_arch = "wasm32")]
fn padded_block(message: &[u8], k: usize, tail: &mut [u8; 128]) -> Option<[u8; 64]> {
    let full = message.len() / 64;
    if k < full {
        return message[k * 64..k * 64 + 64].try_into().ok();
    }
    let rest = &message[full * 64..];
    let end = if rest.len() < 56 { 64 } else { 128 };
    if k - full >= end / 64 {
        return None;
    }
    if k == full {
        *tail = [0u8; 128];
        tail[..rest.len()].copy_from_slice(rest);
        tail[rest.len()] = 0x80;
        tail[end - 8..end].copy_from_slice(&((message.len() as u64) * 8).to_be_bytes());
    }
    let at = (k - full) * 64;
    tail[at..at + 64].try_into().ok()
}

#[cfg(target_arch = "wasm32")]
mod lanes {
    use core::arch::wasm32::*;

    use super::{padded_block, INITIAL, K};

    #[inline(always)]
    fn rotr(x: v128, n: u32) -> v128 {
        v128_or(u32x4_shr(x, n), u32x4_shl(x, 32 - n))
    }

    /// One block per lane into four states; `active` lanes (all ones) take the result.
    #[target_feature(enable = "simd128")]
    fn compress4(state: &mut [v128; 8], blocks: &[[u8; 64]; 4], active: v128) {
        let mut w = [u32x4_splat(0); 16];
        for (i, slot) in w.iter_mut().enumerate() {
            let word = |b: &[u8; 64]| u32::from_be_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]);
            *slot = u32x4(word(&blocks[0]), word(&blocks[1]), word(&blocks[2]), word(&blocks[3]));
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut h] = *state;
        macro_rules! round {
            ($a:ident, $b:ident, $c:ident, $d:ident, $e:ident, $f:ident, $g:ident, $h:ident, $i:expr) => {
                if $i >= 16 {
                    let (w1, w14) = (w[($i + 1) & 15], w[($i + 14) & 15]);
                    let s0 = v128_xor(v128_xor(rotr(w1, 7), rotr(w1, 18)), u32x4_shr(w1, 3));
                    let s1 = v128_xor(v128_xor(rotr(w14, 17), rotr(w14, 19)), u32x4_shr(w14, 10));
                    w[$i & 15] = u32x4_add(u32x4_add(w[$i & 15], s0), u32x4_add(w[($i + 9) & 15], s1));
                }
                let s1 = v128_xor(v128_xor(rotr($e, 6), rotr($e, 11)), rotr($e, 25));
                let choice = v128_xor($g, v128_and($e, v128_xor($f, $g)));
                let t1 = u32x4_add(u32x4_add($h, s1), u32x4_add(choice, u32x4_add(u32x4_splat(K[$i]), w[$i & 15])));
                let s0 = v128_xor(v128_xor(rotr($a, 2), rotr($a, 13)), rotr($a, 22));
                let majority = v128_or(v128_and($a, $b), v128_and($c, v128_or($a, $b)));
                $d = u32x4_add($d, t1);
                $h = u32x4_add(t1, u32x4_add(s0, majority));
            };
        }
        sixty_four_rounds!(round; a, b, c, d, e, f, g, h);
        for (s, v) in state.iter_mut().zip([a, b, c, d, e, f, g, h]) {
            *s = v128_bitselect(u32x4_add(*s, v), *s, active);
        }
    }

    #[target_feature(enable = "simd128")]
    pub(super) fn digest4(messages: &[&[u8]], out: &mut [[u8; 32]; 4]) {
        let mut state = INITIAL.map(|word| u32x4_splat(word));
        let mut tails = [[0u8; 128]; 4];
        let mut blocks = [[0u8; 64]; 4];
        for k in 0.. {
            let mut active = [0u32; 4];
            for lane in 0..messages.len().min(4) {
                if let Some(block) = padded_block(messages[lane], k, &mut tails[lane]) {
                    blocks[lane] = block;
                    active[lane] = u32::MAX;
                }
            }
            if active == [0; 4] {
                break;
            }
            compress4(&mut state, &blocks, u32x4(active[0], active[1], active[2], active[3]));
        }
        let lane_words = |v: v128| {
            [
                u32x4_extract_lane::<0>(v),
                u32x4_extract_lane::<1>(v),
                u32x4_extract_lane::<2>(v),
                u32x4_extract_lane::<3>(v),
            ]
        };
        for (i, v) in state.into_iter().enumerate() {
            for (lane, word) in lane_words(v).into_iter().enumerate() {
                out[lane][4 * i..4 * i + 4].copy_from_slice(&word.to_be_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    use super::digest;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn the_nist_vectors() {
        assert_eq!(hex(&digest(b"")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        assert_eq!(hex(&digest(b"abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(
            hex(&digest(b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
        assert_eq!(
            hex(&digest(&[b'a'; 1_000_000])),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
        );
    }

    #[test]
    fn four_messages_of_any_lengths_at_once_digest_as_one_by_one() {
        let message: Vec<u8> = (0..300u32).map(|i| (i * 17 + 3) as u8).collect();
        for (a, b, c, d) in
            [(0, 1, 55, 56), (63, 64, 65, 119), (120, 127, 128, 200), (116, 116, 300, 0), (7, 300, 3, 129)]
        {
            let lengths = [a, b, c, d];
            for count in 1..=4 {
                let messages: Vec<&[u8]> = lengths[..count].iter().map(|n| &message[..*n]).collect();
                let mut out = [[0u8; 32]; 4];
                super::digest_up_to_four(&messages, &mut out);
                for (lane, m) in messages.iter().enumerate() {
                    assert_eq!(out[lane], digest(m), "lengths {lengths:?}, lane {lane} of {count}");
                }
            }
        }
    }

    #[test]
    fn every_length_across_three_blocks_agrees_with_sha2() {
        let message: Vec<u8> = (0..200u32).map(|i| (i * 31 + 7) as u8).collect();
        for len in 0..message.len() {
            let expected: [u8; 32] = Sha256::digest(&message[..len]).into();
            assert_eq!(digest(&message[..len]), expected, "{len} bytes");
        }
    }
}
