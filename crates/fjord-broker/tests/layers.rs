//! The broker's layering, checked from its sources: each folder of `src/` is a layer, and a layer
//! may name only the layers below it (through `crate::` paths) and only the crates its job needs.
//! A failure names the file, the line and the import that breaks the rule.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Each layer, bottom up, with the broker layers it may import.
const LAYERS: &[(&str, &[&str])] = &[
    ("metrics", &[]),
    ("quota", &[]),
    ("net", &["quota", "metrics"]),
    ("link", &[]),
    ("replication", &["link", "quota", "metrics"]),
    ("coordinator", &["replication", "link", "metrics"]),
    (
        "api",
        &[
            "coordinator",
            "replication",
            "link",
            "net",
            "quota",
            "metrics",
        ],
    ),
    (
        "server",
        &[
            "api",
            "coordinator",
            "replication",
            "link",
            "net",
            "quota",
            "metrics",
        ],
    ),
];

/// Crates a layer must not use: the coordinators' and share partitions' state machines belong
/// above replication, and
/// the connections below know nothing of logs or coordinators.
const FORBIDDEN_CRATES: &[(&str, &[&str])] = &[
    (
        "net",
        &[
            "fjord_metadata",
            "fjord_quorum",
            "fjord_controller",
            "fjord_group",
            "fjord_txn",
            "fjord_share",
            "fjord_client",
        ],
    ),
    (
        "link",
        &[
            "fjord_storage",
            "fjord_group",
            "fjord_txn",
            "fjord_share",
            "fjord_records",
        ],
    ),
    ("replication", &["fjord_group", "fjord_txn", "fjord_share"]),
    (
        "metrics",
        &[
            "fjord_storage",
            "fjord_metadata",
            "fjord_quorum",
            "fjord_group",
            "fjord_txn",
            "fjord_share",
            "fjord_client",
        ],
    ),
    (
        "quota",
        &[
            "fjord_storage",
            "fjord_quorum",
            "fjord_group",
            "fjord_txn",
            "fjord_share",
            "fjord_client",
        ],
    ),
];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The file's lines with `//` comments cut off (doc comments name modules freely).
fn code_lines(text: &str) -> Vec<(usize, String)> {
    text.lines()
        .enumerate()
        .map(|(i, line)| {
            let code = match line.find("//") {
                Some(at) => &line[..at],
                None => line,
            };
            (i + 1, code.to_string())
        })
        .collect()
}

/// The broker layers a line names: `crate::x::…` paths, and the members of `use crate::{x, y}`.
fn layers_named(line: &str, layers: &[&str]) -> Vec<String> {
    let mut named = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for member in group[..end].split(',') {
                let first = member.trim().split("::").next().unwrap_or("").trim();
                named.push(first.to_string());
            }
            continue;
        }
        let first: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        named.push(first);
    }
    named.retain(|n| layers.contains(&n.as_str()));
    named
}

fn layer_of(file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src_dir()).unwrap();
    let mut parts = relative.components();
    let first = parts.next()?.as_os_str().to_str()?.to_string();
    parts.next().map(|_| first)
}

#[test]
fn every_layer_imports_only_the_layers_below_it() {
    let layers: Vec<&str> = LAYERS.iter().map(|(name, _)| *name).collect();
    let allowed: BTreeMap<&str, &[&str]> = LAYERS.iter().copied().collect();
    let mut files = Vec::new();
    rust_files(&src_dir(), &mut files);
    files.sort();
    let mut broken = Vec::new();
    for file in &files {
        let shown = file.strip_prefix(src_dir()).unwrap().display().to_string();
        let Some(layer) = layer_of(file) else {
            assert_eq!(
                shown, "lib.rs",
                "{shown}: every module lives in a layer's folder"
            );
            continue;
        };
        let Some(may_import) = allowed.get(layer.as_str()) else {
            broken.push(format!(
                "{shown}: folder `{layer}` is not a layer of LAYERS"
            ));
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        // Inside an inline module (a test module), `super::` is the layer's own root.
        let mut inline_module = false;
        for (number, line) in code_lines(&text) {
            let trimmed = line.trim_start();
            inline_module |= (trimmed.starts_with("mod ") || trimmed.starts_with("pub mod "))
                && trimmed.trim_end().ends_with('{');
            for named in layers_named(&line, &layers) {
                if named != layer && !may_import.contains(&named.as_str()) {
                    broken.push(format!(
                        "{shown}:{number}: `{layer}` imports `{named}`: {}",
                        line.trim()
                    ));
                }
            }
            if shown.ends_with("mod.rs") && !inline_module && line.contains("super::") {
                broken.push(format!(
                    "{shown}:{number}: a layer's root reaches the crate root through `super::`"
                ));
            }
            if let Some((_, crates)) = FORBIDDEN_CRATES.iter().find(|(l, _)| *l == layer) {
                for name in crates.iter() {
                    let used = line.match_indices(name).any(|(at, _)| {
                        // A longer identifier (a metric named `fjord_group_…`) is not the crate.
                        let next = line[at + name.len()..].chars().next();
                        !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
                    });
                    if used {
                        broken.push(format!(
                            "{shown}:{number}: `{layer}` uses the crate `{name}`: {}",
                            line.trim()
                        ));
                    }
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "the broker's layering is broken:\n{}",
        broken.join("\n")
    );
}

#[test]
fn every_module_says_what_it_owns() {
    let mut files = Vec::new();
    rust_files(&src_dir(), &mut files);
    let undocumented: Vec<String> = files
        .iter()
        .filter(|file| {
            let text = std::fs::read_to_string(file).unwrap();
            !text.trim_start().starts_with("//!")
        })
        .map(|file| file.strip_prefix(src_dir()).unwrap().display().to_string())
        .collect();
    assert!(
        undocumented.is_empty(),
        "modules without a `//!` paragraph: {undocumented:?}"
    );
}

#[test]
fn the_checker_sees_imports_in_every_form() {
    let layers = ["api", "link", "replication"];
    assert_eq!(layers_named("use crate::api::Broker;", &layers), ["api"]);
    assert_eq!(
        layers_named("use crate::{link::peers, replication::Partition};", &layers),
        ["link", "replication"]
    );
    assert_eq!(
        layers_named(
            "    let x = crate::link::peers::connect_to_broker(a);",
            &layers
        ),
        ["link"]
    );
    assert!(layers_named("use fjord_common::now_ms;", &layers).is_empty());
    assert_eq!(
        code_lines("use crate::api::X; // crate::link")[0].1,
        "use crate::api::X; "
    );
}
