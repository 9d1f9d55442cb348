//! How long an operation id can be, and how a per-fact id is kept within it.
//!
//! An operation id is the outbox's primary key in every store. The narrowest
//! column is MySQL's and MariaDB's `VARCHAR(768)` (utf8mb4: 768 characters,
//! 3,072 bytes, InnoDB's longest index key); PostgreSQL's and SQLite's `TEXT`
//! and MongoDB's `_id` hold more. An id of at most [`MAX_OPERATION_ID_BYTES`]
//! UTF-8 bytes has at most that many characters, so it fits every store.
//!
//! The field limits bound every form but one below it (the `const`
//! assertions check the sums): `<name>:{workflowId}` is at most
//! 64 + 1 + 512 bytes, `<name>:{revision}:{workflowId}` 64 + 1 + 20 + 1 + 512.
//! A per-fact id, `<name>:{<key>}:{workflowId}`, is not: its key is a text of
//! up to 512 bytes, and escaping (`%` as `%25`, `:` as `%3A`) can triple it,
//! to 2,114 bytes in all. A per-fact id whose full rendering is longer than
//! the maximum is written with its key part replaced by
//! [`HASHED_FACT_KEY_PREFIX`] and the lowercase hex SHA-256 of the key as the
//! event carries it (its UTF-8 bytes, unescaped):
//! `review-deposit:%sha256-<64 hex digits>:<workflowId>`, at most
//! 64 + 1 + 72 + 1 + 512 bytes.
//!
//! Every id that fits is rendered as before, byte for byte. The hashed form
//! still splits back one way (name, key part, workflow id: the key part has
//! no colon), and it never equals an id rendered in full: an escaped key
//! holds `%` only in `%25` and `%3A`, never before an `s`. Two distinct
//! keys share a hashed id only if their SHA-256 digests collide.

use crate::field::MAX_TEXT_BYTES;
use crate::jcs::hex;
use crate::sha256;

/// The longest operation id any rule can emit, in UTF-8 bytes.
pub const MAX_OPERATION_ID_BYTES: usize = 768;

/// The longest operation name in an id template (`<name>:…`), in bytes (ASCII).
pub const MAX_OPERATION_NAME_BYTES: usize = 64;

/// What a hashed fact key starts with, in place of the escaped key.
pub const HASHED_FACT_KEY_PREFIX: &str = "%sha256-";

/// A hashed key part: the prefix and 64 hex digits.
pub const HASHED_FACT_KEY_BYTES: usize = HASHED_FACT_KEY_PREFIX.len() + 64;

/// Digits of the largest revision (`u64::MAX`).
const MAX_REVISION_DIGITS: usize = 20;

// The longest id of each form, from the field limits, fits the maximum.
const _: () = assert!(MAX_OPERATION_NAME_BYTES + 1 + MAX_TEXT_BYTES <= MAX_OPERATION_ID_BYTES);
const _: () =
    assert!(MAX_OPERATION_NAME_BYTES + 1 + MAX_REVISION_DIGITS + 1 + MAX_TEXT_BYTES <= MAX_OPERATION_ID_BYTES);
const _: () = assert!(
    MAX_OPERATION_NAME_BYTES + 1 + HASHED_FACT_KEY_BYTES + 1 + MAX_REVISION_DIGITS + 1 + MAX_TEXT_BYTES
        <= MAX_OPERATION_ID_BYTES
);

/// The key part of a per-fact id too long to render in full: the prefix and
/// the hex SHA-256 of the key's UTF-8 bytes, unescaped.
pub fn hashed_fact_key(key: &str) -> String {
    let mut out = String::with_capacity(HASHED_FACT_KEY_BYTES);
    out.push_str(HASHED_FACT_KEY_PREFIX);
    out.push_str(&hex(&sha256::digest(key.as_bytes())));
    out
}
