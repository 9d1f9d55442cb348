//! What the native and the wasm layers share of the RFC 8785 vectors
//! (tests/vectors/jcs): the six published files, the number cases, and a
//! seeded stream of doubles, so a failure names a reproducible one.

/// The six files of the published RFC 8785 test data: (name, input, output).
pub const JCS_FILES: &[(&str, &str, &str)] = &[
    ("arrays", include_str!("../vectors/jcs/input/arrays.json"), include_str!("../vectors/jcs/output/arrays.json")),
    ("french", include_str!("../vectors/jcs/input/french.json"), include_str!("../vectors/jcs/output/french.json")),
    (
        "structures",
        include_str!("../vectors/jcs/input/structures.json"),
        include_str!("../vectors/jcs/output/structures.json"),
    ),
    ("unicode", include_str!("../vectors/jcs/input/unicode.json"), include_str!("../vectors/jcs/output/unicode.json")),
    ("values", include_str!("../vectors/jcs/input/values.json"), include_str!("../vectors/jcs/output/values.json")),
    ("weird", include_str!("../vectors/jcs/input/weird.json"), include_str!("../vectors/jcs/output/weird.json")),
];

pub const JCS_NUMBERS: &str = include_str!("../vectors/jcs/numbers.json");

/// SplitMix64.
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}
