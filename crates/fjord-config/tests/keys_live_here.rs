//! Config keys are named in fjord-config only: every other crate reads typed settings
//! (`TopicSettings`, `BrokerConfig::group_coordinator`, `leader_elections`, …), so a key's
//! name, type and default live in one table. This scans the workspace's other crates for a
//! known key written as a string literal outside test code, and names each one it finds.

use std::path::{Path, PathBuf};

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A file's lines up to its test module (`#[cfg(test)]` to the end is test code), with `//`
/// comments cut off: docs may name keys.
fn non_test_lines(text: &str) -> Vec<(usize, &str)> {
    text.lines()
        .enumerate()
        .take_while(|(_, line)| !line.trim_start().starts_with("#[cfg(test)]"))
        .map(|(i, line)| (i + 1, line.find("//").map_or(line, |at| &line[..at])))
        .collect()
}

/// Each known key written as a literal in `text`, as `line: "key"`.
fn keys_named(text: &str, keys: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for (number, line) in non_test_lines(text) {
        for key in keys {
            if line.contains(&format!("\"{key}\"")) {
                found.push(format!("{number}: \"{key}\""));
            }
        }
    }
    found
}

/// Broker and topic keys (a key that is both, such as `min.insync.replicas`, once).
fn known_keys() -> Vec<&'static str> {
    let mut keys: Vec<&str> = fjord_config::broker_config_keys()
        .map(|(name, _)| name)
        .chain(fjord_config::TOPIC_CONFIGS.iter().map(|def| def.name))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// Files that name keys for another reason than reading config: `meta.properties` is a file
/// format of its own whose keys share config keys' names; the console asks a broker for a
/// topic's configs by name over the wire, as any admin client does; `tests.rs` modules are
/// test code.
fn exempt(file: &Path) -> bool {
    file.ends_with("fjord-storage/src/meta_properties.rs")
        || file.ends_with("fjord-console/src/api.rs")
        || file.file_name().is_some_and(|n| n == "tests.rs")
}

#[test]
fn config_keys_are_named_only_in_fjord_config() {
    let keys = known_keys();
    let mut found = Vec::new();
    for entry in std::fs::read_dir(crates_dir()).unwrap() {
        let krate = entry.unwrap().path();
        if krate.file_name().is_some_and(|n| n == "fjord-config") {
            continue;
        }
        let mut files = Vec::new();
        rust_files(&krate.join("src"), &mut files);
        files.sort();
        for file in files.into_iter().filter(|f| !exempt(f)) {
            let text = std::fs::read_to_string(&file).unwrap();
            let shown = file
                .strip_prefix(crates_dir())
                .unwrap()
                .display()
                .to_string();
            found.extend(
                keys_named(&text, &keys)
                    .into_iter()
                    .map(|k| format!("{shown}:{k}")),
            );
        }
    }
    assert!(
        found.is_empty(),
        "config keys named outside fjord-config (read them through its typed settings):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scan_finds_a_key_in_code_but_not_in_comments_or_tests() {
    let keys = known_keys();
    let text = "let a = get(\"min.insync.replicas\");\n\
                // get(\"retention.ms\")\n\
                #[cfg(test)]\n\
                let b = get(\"segment.bytes\");\n";
    assert_eq!(keys_named(text, &keys), vec!["1: \"min.insync.replicas\""]);
}
