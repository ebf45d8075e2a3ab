//! `ssl.principal.mapping.rules` (KIP-371): how the distinguished name of a client's TLS
//! certificate becomes the name of its principal, as Kafka's `SslPrincipalMapper` does it. Rules
//! are tried in order; the first whose pattern matches the whole name gives it:
//! `RULE:<pattern>/<replacement>/[L|U]` rewrites it (`$1` naming a group; `L` / `U` then lower- or
//! upper-cases it), `DEFAULT` keeps it. A name no rule matches is refused.

use regex::Regex;

use crate::Unreadable;

/// One rule.
#[derive(Debug, Clone)]
enum Rule {
    Default,
    Rewrite {
        /// The pattern anchored at both ends: a rule applies only when it matches all of the name.
        whole: Regex,
        pattern: Regex,
        /// The replacement in the `regex` crate's syntax.
        replacement: String,
        case: Case,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Keep,
    Lower,
    Upper,
}

/// The parsed `ssl.principal.mapping.rules`.
#[derive(Debug, Clone)]
pub struct PrincipalMapper {
    rules: Vec<Rule>,
}

impl Default for PrincipalMapper {
    fn default() -> Self {
        PrincipalMapper {
            rules: vec![Rule::Default],
        }
    }
}

impl PartialEq for PrincipalMapper {
    fn eq(&self, other: &Self) -> bool {
        format!("{:?}", self.rules) == format!("{:?}", other.rules)
    }
}

impl Eq for PrincipalMapper {}

impl PrincipalMapper {
    /// The rules of `text`, or why they cannot be read.
    pub fn parse(text: &str) -> Result<PrincipalMapper, Unreadable> {
        let mut rules = Vec::new();
        let mut rest = text.trim();
        while !rest.is_empty() {
            let (rule, after) = if let Some(after) = rest.strip_prefix("DEFAULT") {
                (Rule::Default, after)
            } else if let Some(after) = rest.strip_prefix("RULE:") {
                rewrite(after)?
            } else {
                return Err(Unreadable(format!("Invalid rule: {rest}")));
            };
            rules.push(rule);
            // Anything up to the next comma belongs to this rule and is ignored, as Kafka does.
            rest = match after.find(',') {
                Some(comma) => after[comma + 1..].trim_start(),
                None => "",
            };
        }
        Ok(PrincipalMapper { rules })
    }

    /// The principal name of the certificate named `distinguished_name` (RFC 2253), or None when
    /// no rule applies.
    pub fn map(&self, distinguished_name: &str) -> Option<String> {
        self.rules.iter().find_map(|rule| match rule {
            Rule::Default => Some(distinguished_name.to_string()),
            Rule::Rewrite {
                whole,
                pattern,
                replacement,
                case,
            } => whole.is_match(distinguished_name).then(|| {
                let name = pattern
                    .replace_all(distinguished_name, replacement.as_str())
                    .into_owned();
                match case {
                    Case::Keep => name,
                    Case::Lower => name.to_lowercase(),
                    Case::Upper => name.to_uppercase(),
                }
            }),
        })
    }
}

/// `<pattern>/<replacement>/[LU]` after `RULE:`; the rule and what follows it.
fn rewrite(text: &str) -> Result<(Rule, &str), Unreadable> {
    let invalid = || Unreadable(format!("Invalid rule: RULE:{text}"));
    let (pattern, after) = until_slash(text).ok_or_else(invalid)?;
    let (replacement, after) = until_slash(after).ok_or_else(invalid)?;
    let (case, after) = match after.chars().next() {
        Some('L') => (Case::Lower, &after[1..]),
        Some('U') => (Case::Upper, &after[1..]),
        _ => (Case::Keep, after),
    };
    let compile = |p: &str| {
        Regex::new(p).map_err(|e| Unreadable(format!("Invalid rule pattern {pattern}: {e}")))
    };
    let whole = compile(&format!("^(?:{pattern})$"))?;
    let compiled = compile(pattern)?;
    let replacement = rust_replacement(replacement, compiled.captures_len() - 1);
    Ok((
        Rule::Rewrite {
            whole,
            pattern: compiled,
            replacement,
            case,
        },
        after,
    ))
}

/// The text up to the first `/` not escaped by a backslash, and what follows that slash.
fn until_slash(text: &str) -> Option<(&str, &str)> {
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '/' => return Some((&text[..i], &text[i + 1..])),
            _ => {}
        }
    }
    None
}

/// A Java replacement (`$1` a group, `\x` a literal x) in the `regex` crate's syntax; a `$n`
/// beyond the pattern's groups stays literal, as Kafka escapes it.
fn rust_replacement(java: &str, groups: usize) -> String {
    let mut out = String::with_capacity(java.len());
    let mut chars = java.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('$') => out.push_str("$$"),
                Some(next) => out.push(next),
                None => {}
            },
            '$' => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                    digits.push(*d);
                    chars.next();
                }
                match digits.parse::<usize>() {
                    Ok(n) if n <= groups => out.push_str(&format!("${{{n}}}")),
                    _ => {
                        out.push_str("$$");
                        out.push_str(&digits);
                    }
                }
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_keeps_the_name_and_rules_rewrite_it_in_order() {
        let dn = "CN=alice,OU=ServiceUsers,O=Example,L=Oslo,ST=Oslo,C=NO";
        assert_eq!(PrincipalMapper::default().map(dn).as_deref(), Some(dn));
        let rules = PrincipalMapper::parse(
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/, RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/L, DEFAULT",
        )
        .unwrap();
        assert_eq!(rules.map(dn).as_deref(), Some("alice"));
        assert_eq!(rules.map("CN=Bob,OU=Eng,O=X").as_deref(), Some("bob@eng"));
        assert_eq!(rules.map("O=nobody").as_deref(), Some("O=nobody"));
        let upper = PrincipalMapper::parse("RULE:^CN=([a-z]+).*$/$1/U").unwrap();
        assert_eq!(upper.map("CN=carol,O=X").as_deref(), Some("CAROL"));
        // Without DEFAULT, a name no rule matches has no principal.
        assert_eq!(upper.map("O=X"), None);
    }

    #[test]
    fn escapes_and_bad_rules_are_read_as_kafka_reads_them() {
        let slash = PrincipalMapper::parse(r"RULE:^CN=(.*)\/x$/$1 \$2/").unwrap();
        assert_eq!(slash.map("CN=a/x").as_deref(), Some("a $2"));
        assert!(PrincipalMapper::parse("RULE:^CN=(.*$/$1/").is_err());
        assert!(PrincipalMapper::parse("RULE:^CN=x").is_err());
        assert!(PrincipalMapper::parse("NOPE").is_err());
    }
}
