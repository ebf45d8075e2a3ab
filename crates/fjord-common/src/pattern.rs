//! Regular expressions clients send (KIP-848 topic subscriptions, KIP-1152 transactional id
//! patterns): Kafka compiles them with RE2/J and matches whole names, so they are anchored here,
//! and bounded so that a hostile pattern cannot take unbounded memory.

pub use regex::Regex;

/// Bound on a compiled pattern's size.
const SIZE_LIMIT: usize = 1 << 20;

/// `pattern` compiled to match whole strings (Java's `Matcher.matches`); the compiler's
/// complaint when it is not a valid (or is too large a) regular expression.
pub fn whole_match(pattern: &str) -> Result<Regex, String> {
    regex::RegexBuilder::new(&format!("^(?:{pattern})$"))
        .size_limit(SIZE_LIMIT)
        .dfa_size_limit(SIZE_LIMIT)
        .build()
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_whole_names_and_bad_ones_are_refused() {
        let r = whole_match("orders-.*").unwrap();
        assert!(r.is_match("orders-eu"));
        assert!(!r.is_match("my-orders-eu"), "anchored at the start");
        let r = whole_match("a|b").unwrap();
        assert!(r.is_match("a") && r.is_match("b") && !r.is_match("ab"));
        assert!(whole_match("(unclosed").is_err());
        assert!(whole_match("a{1000}{1000}").is_err(), "too large");
    }
}
