//! The one sort of the core (canonical JSON, rule-set loading and layouts,
//! the verifier's histories): a heapsort, O(n log n) on any input (a
//! definition may hold an object of 50,000 keys) and a few hundred bytes of
//! wasm per element type, where each use of the standard library's sort
//! took several kilobytes. Unstable: every use sorts keys that are unique or
//! elements that are equal only when identical.

pub fn sort_by<T>(items: &mut [T], less: &mut dyn FnMut(&T, &T) -> bool) {
    fn sift<T>(items: &mut [T], mut root: usize, end: usize, less: &mut dyn FnMut(&T, &T) -> bool) {
        loop {
            let mut child = 2 * root + 1;
            if child >= end {
                return;
            }
            if child + 1 < end && less(&items[child], &items[child + 1]) {
                child += 1;
            }
            if !less(&items[root], &items[child]) {
                return;
            }
            items.swap(root, child);
            root = child;
        }
    }
    let n = items.len();
    for start in (0..n / 2).rev() {
        sift(items, start, n, less);
    }
    for end in (1..n).rev() {
        items.swap(0, end);
        sift(items, 0, end, less);
    }
}

#[cfg(test)]
mod tests {
    use super::sort_by;

    #[test]
    fn sorts_every_permutation_of_small_inputs_and_a_large_one() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for len in 0..200 {
            let mut items: Vec<u64> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x % 50
                })
                .collect();
            let mut expected = items.clone();
            expected.sort();
            sort_by(&mut items, &mut |a, b| a < b);
            assert_eq!(items, expected, "{len} items");
        }
        let mut large: Vec<u32> = (0..100_000u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
        let mut expected = large.clone();
        expected.sort_unstable();
        sort_by(&mut large, &mut |a, b| a < b);
        assert_eq!(large, expected);
    }
}
