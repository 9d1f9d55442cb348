#![cfg(not(target_arch = "wasm32"))]
//! Issue 37: every operation id the rules can emit fits every store's key
//! column (MySQL's VARCHAR(768) is the narrowest). A per-fact id too long to
//! render in full keeps its name and workflow id and hashes its key; every
//! id that fits is rendered as before.

use serde_json::{json, Map, Value};

use idemflow::field::MAX_TEXT_BYTES;
use idemflow::jcs::hex;
use idemflow::operation_id::{hashed_fact_key, HASHED_FACT_KEY_PREFIX, MAX_OPERATION_ID_BYTES};
use idemflow::{decide, Outcome, RuleSet};

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => unreachable!("an object"),
    }
}

/// The review-deposit id of a partial deposit `key` confirmed on swap
/// `workflow_id` (deposit-swap v3: below expectedUnits, reviewed once).
fn review_id(workflow_id: &str, key: &str) -> String {
    let rules = RuleSet::builtin_version("deposit-swap", Some(3)).expect("built-in");
    let event = object(json!({
        "eventId": "e1", "workflowId": workflow_id, "type": "DEPOSIT_CONFIRMED",
        "depositRef": key, "amountUnits": "5", "sequence": 1,
    }));
    let workflow = object(json!({ "id": workflow_id, "status": "waiting", "revision": 1, "expectedUnits": "100" }));
    let decision = decide(rules, &event, None, Some(&workflow)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(decision.outcome, Outcome::Applied);
    let ids: Vec<&str> = decision.write_set.outbox.iter().map(|op| op.id.as_str()).collect();
    assert_eq!(ids.len(), 1, "one review: {ids:?}");
    assert_eq!(decision.write_set.receipt.as_ref().expect("a receipt").result.operation_ids, ids);
    ids[0].to_string()
}

fn sha256_hex(text: &str) -> String {
    hex(&idemflow::sha256::digest(text.as_bytes()))
}

#[test]
fn the_827_byte_id_of_the_issue_keeps_its_name_and_workflow_id_and_hashes_its_key() {
    let workflow_id = format!("swap:{}", "w".repeat(500));
    let key = format!("btc-mainnet:{}", "a".repeat(292));
    assert_eq!((workflow_id.len(), key.len()), (505, 304));
    let id = review_id(&workflow_id, &key);
    assert_eq!(id, format!("review-deposit:%sha256-{}:{workflow_id}", sha256_hex(&key)));
    assert_eq!(id.len(), 15 + 72 + 1 + 505);
}

#[test]
fn ids_that_fit_are_rendered_in_full_as_before() {
    assert_eq!(
        review_id("swap-42", "btc-mainnet:tx-abc:vout-0"),
        "review-deposit:btc-mainnet%3Atx-abc%3Avout-0:swap-42"
    );
    let key = "k".repeat(MAX_TEXT_BYTES);
    assert_eq!(review_id("swap-42", &key), format!("review-deposit:{key}:swap-42"));
    // A key that reads like a hashed one is escaped like any other.
    let lookalike = format!("{HASHED_FACT_KEY_PREFIX}{}", sha256_hex("x"));
    assert_eq!(review_id("swap-42", &lookalike), format!("review-deposit:%25sha256-{}:swap-42", sha256_hex("x")));
}

#[test]
fn the_limit_counts_utf8_bytes_exactly() {
    // 505 bytes in 255 characters: 15 + 247 + 1 + 505 = 768 bytes is kept, 769 is hashed.
    let workflow_id = format!("swap-{}", "é".repeat(250));
    let fits = format!("btc-mainnet:{}", "b".repeat(233));
    let full = review_id(&workflow_id, &fits);
    assert_eq!(full.len(), MAX_OPERATION_ID_BYTES);
    assert_eq!(full, format!("review-deposit:btc-mainnet%3A{}:{workflow_id}", "b".repeat(233)));
    let over = format!("btc-mainnet:{}", "b".repeat(234));
    let hashed = review_id(&workflow_id, &over);
    assert!(hashed.chars().count() < MAX_OPERATION_ID_BYTES, "fewer characters than the limit, more bytes");
    assert_eq!(hashed, format!("review-deposit:{}:{workflow_id}", hashed_fact_key(&over)));
}

#[test]
fn the_longest_inputs_give_an_id_within_the_limit() {
    // Every byte of the key escapes to three, and the workflow id is as long as a text can be.
    let workflow_id = "€".repeat(MAX_TEXT_BYTES / 3);
    for key in [":".repeat(MAX_TEXT_BYTES), "%".repeat(MAX_TEXT_BYTES), "😀".repeat(MAX_TEXT_BYTES / 4)] {
        let id = review_id(&workflow_id, &key);
        assert!(id.len() <= MAX_OPERATION_ID_BYTES, "{} bytes", id.len());
        assert_eq!(id, format!("review-deposit:%sha256-{}:{workflow_id}", sha256_hex(&key)));
    }
}

#[test]
fn a_hashed_id_is_the_same_every_time_and_distinct_keys_give_distinct_ids() {
    let workflow_id = "w".repeat(MAX_TEXT_BYTES);
    let keys: Vec<String> = (0..64).map(|i| format!("{i:03}:{}", "x".repeat(400))).collect();
    let ids: Vec<String> = keys.iter().map(|key| review_id(&workflow_id, key)).collect();
    for (key, id) in keys.iter().zip(&ids) {
        assert_eq!(&review_id(&workflow_id, key), id, "deterministic");
        assert!(id.starts_with("review-deposit:%sha256-") && id.ends_with(&format!(":{workflow_id}")));
    }
    let mut distinct = ids.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), keys.len(), "64 keys, 64 ids");
    // One key on two workflows: two ids.
    assert_ne!(review_id(&"v".repeat(MAX_TEXT_BYTES), &keys[0]), ids[0]);
}
