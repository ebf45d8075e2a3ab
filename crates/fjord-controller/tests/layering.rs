//! The workspace's crate layering, checked offline from the manifests: the controller's decisions,
//! the metadata image and the configs build without tokio, openraft or storage. The dependencies
//! of workspace crates are read from their `Cargo.toml` (`[dependencies]`, build and target
//! dependencies; not dev-dependencies), those of every other crate from `Cargo.lock`. A failure
//! names the forbidden crate and the path that reaches it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

/// Each crate with the crates it must not depend on, directly or through any other.
const RULES: &[(&str, &[&str])] = &[
    (
        "fjord-config",
        &[
            "fjord-storage",
            "fjord-metadata",
            "fjord-quorum",
            "tokio",
            "openraft",
        ],
    ),
    ("fjord-metadata", &["fjord-storage", "tokio", "openraft"]),
    (
        "fjord-controller",
        &["fjord-storage", "fjord-quorum", "tokio", "openraft"],
    ),
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A line's text before any `#` comment, trimmed.
fn code(line: &str) -> &str {
    line.split('#').next().unwrap_or("").trim()
}

/// The `name = "…"` value of a TOML line, if the line sets `key`.
fn string_value<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let (k, v) = line.split_once('=')?;
    (k.trim() == key).then(|| v.trim().trim_matches('"'))
}

/// A workspace crate's package name and the crates its manifest depends on outside tests.
fn manifest(path: &Path) -> (String, BTreeSet<String>) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut name = None;
    let mut deps = BTreeSet::new();
    let mut section = String::new();
    for line in text.lines().map(code) {
        if line.starts_with('[') {
            section = line.trim_matches(|c| c == '[' || c == ']').to_string();
            continue;
        }
        if section == "package" {
            name = name.or(string_value(line, "name").map(str::to_string));
        }
        let runtime = section == "dependencies"
            || section == "build-dependencies"
            || (section.starts_with("target.") && section.ends_with(".dependencies"));
        if runtime && line.contains('=') {
            let key = line.split('=').next().unwrap_or("").trim();
            // `name.workspace = true`, `name = "1"` or `name = { … }`.
            deps.insert(key.split('.').next().unwrap_or(key).trim().to_string());
        }
    }
    (name.expect("a [package] name"), deps)
}

/// The workspace's crates (`crates/*`) and their dependencies.
fn workspace() -> BTreeMap<String, BTreeSet<String>> {
    let mut crates = BTreeMap::new();
    for entry in std::fs::read_dir(workspace_root().join("crates")).unwrap() {
        let path = entry.unwrap().path().join("Cargo.toml");
        if path.exists() {
            let (name, deps) = manifest(&path);
            crates.insert(name, deps);
        }
    }
    crates
}

/// Every package in `Cargo.lock` and the packages it depends on (all versions of a name merged).
fn lock() -> BTreeMap<String, BTreeSet<String>> {
    let text = std::fs::read_to_string(workspace_root().join("Cargo.lock")).unwrap();
    let mut packages: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for block in text.split("[[package]]").skip(1) {
        let mut name = None;
        let mut deps = BTreeSet::new();
        let mut in_deps = false;
        for line in block.lines().map(code) {
            if let Some(n) = string_value(line, "name") {
                name = Some(n.to_string());
            } else if line.starts_with("dependencies") {
                in_deps = !line.ends_with(']');
            } else if in_deps && line == "]" {
                in_deps = false;
            } else if in_deps {
                // `"name"`, or `"name version"` when several versions are locked.
                let entry = line.trim_end_matches(',').trim_matches('"');
                deps.insert(entry.split(' ').next().unwrap_or(entry).to_string());
            }
        }
        packages
            .entry(name.expect("a package name"))
            .or_default()
            .extend(deps);
    }
    packages
}

/// Every crate `from` depends on, each with the path that reaches it.
fn reachable(from: &str) -> BTreeMap<String, Vec<String>> {
    let (workspace, lock) = (workspace(), lock());
    let deps_of = |name: &str| -> BTreeSet<String> {
        match workspace.get(name) {
            Some(deps) => deps.clone(),
            None => lock.get(name).cloned().unwrap_or_default(),
        }
    };
    let mut paths = BTreeMap::from([(from.to_string(), vec![from.to_string()])]);
    let mut queue = VecDeque::from([from.to_string()]);
    while let Some(name) = queue.pop_front() {
        for dep in deps_of(&name) {
            if !paths.contains_key(&dep) {
                let mut path = paths[&name].clone();
                path.push(dep.clone());
                paths.insert(dep.clone(), path);
                queue.push_back(dep);
            }
        }
    }
    paths
}

#[test]
fn pure_crates_build_without_tokio_openraft_or_storage() {
    let mut broken = Vec::new();
    for (krate, forbidden) in RULES {
        let paths = reachable(krate);
        for dep in *forbidden {
            if let Some(path) = paths.get(*dep) {
                broken.push(format!("{krate} depends on {dep}: {}", path.join(" -> ")));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "crates that must stay sans-IO reach a forbidden crate (see ARCHITECTURE.md, Crates):\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_checker_sees_workspace_and_external_dependencies() {
    let workspace = workspace();
    for (krate, _) in RULES {
        assert!(workspace.contains_key(*krate), "{krate} not found");
    }
    // Through a workspace crate's manifest, and on through Cargo.lock.
    let broker = reachable("fjord-broker");
    assert_eq!(
        broker["openraft"],
        ["fjord-broker", "fjord-quorum", "openraft"]
    );
    assert!(broker.contains_key("tokio") && broker.contains_key("fjord-storage"));
    assert!(reachable("fjord-records").contains_key("zstd-sys"));
    // Dev-dependencies do not count: fjord-storage's benchmarks use criterion.
    assert!(!reachable("fjord-storage").contains_key("criterion"));
}
