// Shared by the fuzz targets: the input's first byte picks a built-in rule set
// (or a loaded one), the rest is the text under test.

use idemflow::RuleSet;

#[allow(dead_code)]
pub fn split(data: &[u8]) -> Option<(&'static RuleSet, &str)> {
    let (&selector, rest) = data.split_first()?;
    let name = if selector % 2 == 0 { "deposit-swap" } else { "order-shipment" };
    let text = std::str::from_utf8(rest).ok()?;
    Some((RuleSet::builtin(name).expect("built-in rule sets load"), text))
}

/// Every error the core returns carries a known code and serialises.
pub fn check_error(error: &idemflow::Error) {
    let code = error.code();
    assert!(idemflow::error::CODES.iter().any(|(known, _)| *known == code), "unknown code {code}");
    let _ = error.to_json();
}
