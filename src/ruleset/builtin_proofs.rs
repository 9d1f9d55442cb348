//! The proof behind starting built-ins quickly: a worker loads a built-in
//! rule set without verifying its properties again, so `cargo test` verifies
//! every built-in definition in full and checks that the hash each `Builtin`
//! records as proven is the hash of what was verified.

use super::*;

#[test]
fn every_builtin_verifies_and_its_proven_hash_is_recorded() {
    let mut stale = Vec::new();
    for versions in &BUILTINS {
        for builtin in versions.versions {
            let label = format!("{} v{}", versions.name, builtin.version);
            // The path of a definition from outside: size, structure, every property.
            let rule_set = RuleSet::from_json(builtin.text).unwrap_or_else(|e| panic!("{label} does not verify: {e}"));
            assert_eq!((rule_set.id.as_str(), rule_set.version), (versions.name, builtin.version), "{label}");
            if rule_set.hash != builtin.proven_hash {
                stale.push(format!("{label}: proven_hash: \"{}\" (recorded {})", rule_set.hash, builtin.proven_hash));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "built-in definitions changed and verify: record their hashes as proven in BUILTINS (src/ruleset/mod.rs), \
         and in tests/vectors/rulesets.json:\n{}",
        stale.join("\n")
    );
}

#[test]
fn a_builtin_loads_unverified_to_the_same_rules_as_verified() {
    for versions in &BUILTINS {
        for builtin in versions.versions {
            let label = format!("{} v{}", versions.name, builtin.version);
            let quick = builtin.load(versions.name).unwrap_or_else(|e| panic!("{label}: {e}"));
            let verified = RuleSet::from_json(builtin.text).unwrap();
            assert_eq!(quick.hash, verified.hash, "{label}");
            assert_eq!(quick.cells, verified.cells, "{label}");
            assert_eq!(table::markdown(&quick), table::markdown(&verified), "{label}");
        }
    }
}

#[test]
fn a_builtin_whose_definition_is_not_the_proven_one_is_refused_as_fatal() {
    let unproven = Builtin {
        version: 1,
        text: BUILTIN_DEPOSIT_SWAP_V1,
        proven_hash: "sha256:0000000000000000000000000000000000000000000000000000000000000000",
        cell: OnceLock::new(),
    };
    let error = unproven.load("deposit-swap").unwrap_err();
    assert_eq!(error.code(), "RULESET_INVALID");
    assert_eq!(error.disposition(), Disposition::Fatal);
    assert!(error.to_string().contains("not the proven sha256:0000"), "{error}");
}
