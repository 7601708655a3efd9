//! The dependency-direction check: the layering of `docs/ARCHITECTURE.md`, enforced.
//!
//! Every workspace crate names its layer in `[package.metadata.nanobot] layer = "..."`:
//!
//! | layer | may depend on (workspace crates) | external rule |
//! | --- | --- | --- |
//! | `port` | ports | no runtime, HTTP client or database driver, whatever features are on, except a runtime behind a feature listed in `adapter-features`; tokio's executor-free `sync` primitives are not a runtime |
//! | `policy` | ports (never another policy: each one is usable alone) | never a backend; with `pure = true` also no runtime, HTTP or database |
//! | `turn` | ports, policies | never a backend (`nanobot-turn`: the policies composed into a turn) |
//! | `assembly` | ports, policies, the turn, backends, backend kits | free (`nanobot-memory`: where backends are chosen for a bot builder) |
//! | `backend` | ports, backend kits | free (that is why it is a crate of its own) |
//! | `backend-kit` | ports | free; code several backends share (`nanobot-llm-http`) |
//! | `app` | anything but support and tooling | free |
//! | `testkit` | ports, policies, the turn | never a backend; only dev-dependencies of other crates may name it (`nanobot-testkit`: the suites in one crate) |
//! | `foundation` | nothing | as `port`; every layer may depend on it (`nanobot-fs-support`) |
//! | `support`, `tooling` | nothing | only dev-dependencies of other crates may name them |

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// tokio features that need no executor: the primitives a port may use.
const TOKIO_PRIMITIVES: &[&str] = &["sync"];

/// Async runtimes and executors.
const RUNTIMES: &[&str] = &[
    "tokio",
    "async-std",
    "smol",
    "async-executor",
    "async-global-executor",
    "actix-rt",
    "glommio",
    "monoio",
];
/// HTTP clients and servers.
/// What a port crate may bring only through a feature: an outside backend that turns the
/// default features off pays for neither git nor the tokenizer's tables.
const OPTIONAL_WEIGHT: &[&str] = &["gix", "bpe-openai"];

const HTTP: &[&str] = &[
    "reqwest",
    "hyper",
    "hyper-util",
    "ureq",
    "isahc",
    "surf",
    "h2",
    "curl",
    "attohttpc",
    "axum",
    "actix-web",
];
/// Database drivers and ORMs.
const DATABASES: &[&str] = &[
    "sqlx",
    "sqlx-core",
    "tokio-postgres",
    "postgres",
    "diesel",
    "redis",
    "rusqlite",
    "mysql",
    "mysql_async",
    "mongodb",
    "sea-orm",
    "deadpool-postgres",
    "bb8-postgres",
    "libsqlite3-sys",
];

/// One workspace crate as the check sees it.
#[derive(Debug, Clone)]
pub(crate) struct Crate {
    pub(crate) name: String,
    pub(crate) layer: String,
    pub(crate) pure: bool,
    /// Features that exist only to plug the crate into a runtime (e.g. `tokio`).
    pub(crate) adapter_features: Vec<String>,
    /// Every feature except `default`.
    pub(crate) features: Vec<String>,
    /// Workspace crates it names as normal or build dependencies.
    pub(crate) internal_deps: Vec<String>,
}

/// Runs the check on the workspace at `root`.
pub(crate) fn check(root: &Path) -> Result<(), String> {
    let crates = workspace_crates(root)?;
    let mut problems = Vec::new();
    let layers: BTreeMap<&str, &str> = crates
        .iter()
        .map(|c| (c.name.as_str(), c.layer.as_str()))
        .collect();
    for krate in &crates {
        problems.extend(internal_violations(krate, &layers));
        if needs_external_check(krate) {
            let trees = ExternalTrees {
                default: tree(root, &krate.name, &[])?,
                without_adapters: tree(root, &krate.name, &features_arg(krate))?,
                all: tree(root, &krate.name, &["--all-features".to_owned()])?,
                bare: tree(root, &krate.name, &["--no-default-features".to_owned()])?,
            };
            problems.extend(external_violations(krate, &trees));
        }
    }
    if problems.is_empty() {
        println!(
            "{} crates, every dependency points the allowed way",
            crates.len()
        );
        Ok(())
    } else {
        for problem in &problems {
            eprintln!("  - {problem}");
        }
        Err(format!(
            "{} dependency-direction violation(s); see docs/ARCHITECTURE.md, invariants",
            problems.len()
        ))
    }
}

fn workspace_crates(root: &Path) -> Result<Vec<Crate>, String> {
    parse_crates(&metadata(root)?)
}

/// `cargo metadata --no-deps` of the workspace at `root`.
pub(crate) fn metadata(root: &Path) -> Result<Value, String> {
    let output = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()))
        .args(["metadata", "--format-version", "1", "--no-deps", "--locked"])
        .current_dir(root)
        .output()
        .map_err(|e| format!("could not run cargo metadata: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("cargo metadata printed something that is not JSON: {e}"))
}

/// Reads the workspace crates out of `cargo metadata --no-deps` output.
pub(crate) fn parse_crates(metadata: &Value) -> Result<Vec<Crate>, String> {
    let packages = metadata["packages"]
        .as_array()
        .ok_or("cargo metadata has no package list")?;
    let names: Vec<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    let mut crates = Vec::new();
    for package in packages {
        let name = package["name"].as_str().unwrap_or_default().to_owned();
        let nanobot = &package["metadata"]["nanobot"];
        let layer = nanobot["layer"].as_str().ok_or_else(|| {
            format!(
                "crate `{name}` does not name its layer: add [package.metadata.nanobot] layer = \
                 \"port\" | \"policy\" | \"turn\" | \"backend\" | \"assembly\" | \"app\" | \"testkit\" | \"support\" | \"tooling\""
            )
        })?;
        if ![
            "port",
            "policy",
            "turn",
            "assembly",
            "backend",
            "backend-kit",
            "foundation",
            "app",
            "testkit",
            "support",
            "tooling",
        ]
        .contains(&layer)
        {
            return Err(format!("crate `{name}` names an unknown layer `{layer}`"));
        }
        let strings = |value: &Value| -> Vec<String> {
            value
                .as_array()
                .map(|items| {
                    items
                        .iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        let features = package["features"]
            .as_object()
            .map(|f| f.keys().filter(|k| *k != "default").cloned().collect())
            .unwrap_or_default();
        let internal_deps = package["dependencies"]
            .as_array()
            .map(|deps| {
                deps.iter()
                    .filter(|d| d["kind"].as_str() != Some("dev"))
                    .filter_map(|d| d["name"].as_str())
                    .filter(|d| names.contains(d) && *d != name)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        crates.push(Crate {
            layer: layer.to_owned(),
            pure: nanobot["pure"].as_bool().unwrap_or(false),
            adapter_features: strings(&nanobot["adapter-features"]),
            features,
            internal_deps,
            name,
        });
    }
    Ok(crates)
}

/// Which workspace crates a crate of each layer may depend on.
fn allowed_internal(layer: &str) -> &'static [&'static str] {
    match layer {
        "port" => &["port", "foundation"],
        "policy" => &["port", "foundation"],
        "turn" => &["port", "policy", "foundation"],
        "assembly" => &[
            "port",
            "policy",
            "turn",
            "backend",
            "backend-kit",
            "foundation",
        ],
        "backend" => &["port", "backend-kit", "foundation"],
        "backend-kit" => &["port", "foundation"],
        "testkit" => &["port", "policy", "turn", "foundation"],
        "app" => &[
            "port",
            "policy",
            "turn",
            "assembly",
            "backend",
            "backend-kit",
            "foundation",
            "app",
        ],
        _ => &[],
    }
}

pub(crate) fn internal_violations(krate: &Crate, layers: &BTreeMap<&str, &str>) -> Vec<String> {
    krate
        .internal_deps
        .iter()
        .filter_map(|dep| {
            let dep_layer = layers.get(dep.as_str()).copied().unwrap_or("unknown");
            (!allowed_internal(&krate.layer).contains(&dep_layer)).then(|| {
                format!(
                    "{} `{}` depends on {} `{dep}`, which its layer may not",
                    krate.layer, krate.name, dep_layer
                )
            })
        })
        .collect()
}

fn needs_external_check(krate: &Crate) -> bool {
    krate.layer == "port" || krate.layer == "foundation" || (krate.layer == "policy" && krate.pure)
}

/// The normal-dependency trees of one crate under three feature sets.
pub(crate) struct ExternalTrees {
    /// Default features: what a plain `cargo add` pulls in.
    pub(crate) default: Vec<String>,
    /// Every feature except the runtime adapters.
    pub(crate) without_adapters: Vec<String>,
    /// Every feature.
    pub(crate) all: Vec<String>,
    /// No feature at all: what an outside backend that turns the defaults off pays for.
    pub(crate) bare: Vec<String>,
}

pub(crate) fn external_violations(krate: &Crate, trees: &ExternalTrees) -> Vec<String> {
    let mut problems = Vec::new();
    let mut flag = |tree: &[String], banned: &[&str], what: &str, when: &str| {
        for entry in tree {
            let (name, features) = entry.split_once(' ').unwrap_or((entry.as_str(), ""));
            if !banned.contains(&name) || is_tokio_primitives(name, features) {
                continue;
            }
            let problem = format!(
                "{} `{}` pulls in {what} `{name}` {when}",
                krate.layer, krate.name
            );
            if !problems.contains(&problem) {
                problems.push(problem);
            }
        }
    };
    flag(
        &trees.default,
        RUNTIMES,
        "the runtime",
        "with default features",
    );
    flag(
        &trees.without_adapters,
        RUNTIMES,
        "the runtime",
        "through a feature that is not a declared adapter",
    );
    flag(&trees.all, HTTP, "the HTTP crate", "with all features");
    flag(
        &trees.all,
        DATABASES,
        "the database crate",
        "with all features",
    );
    flag(
        &trees.bare,
        OPTIONAL_WEIGHT,
        "the optional",
        "without a feature asking for it",
    );
    problems
}

/// tokio with nothing but executor-free primitives enabled.
fn is_tokio_primitives(name: &str, features: &str) -> bool {
    name == "tokio"
        && features
            .split(',')
            .filter(|f| !f.is_empty())
            .all(|f| TOKIO_PRIMITIVES.contains(&f))
}

fn features_arg(krate: &Crate) -> Vec<String> {
    let features: Vec<&str> = krate
        .features
        .iter()
        .filter(|f| !krate.adapter_features.contains(f))
        .map(String::as_str)
        .collect();
    if features.is_empty() {
        Vec::new()
    } else {
        vec!["--features".to_owned(), features.join(",")]
    }
}

/// The names of every crate in `package`'s normal-dependency tree under `feature_args`.
fn tree(root: &Path, package: &str, feature_args: &[String]) -> Result<Vec<String>, String> {
    let output = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()))
        .args([
            "tree", "--locked", "-p", package, "-e", "normal", "--prefix", "none", "--format",
            "{p}|{f}",
        ])
        .args(feature_args)
        .current_dir(root)
        .output()
        .map_err(|e| format!("could not run cargo tree: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "cargo tree -p {package} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let mut names: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            // "tokio v1.54.1|sync,time" -> "tokio sync,time"
            let (package, features) = line.split_once('|')?;
            let name = package.split_whitespace().next()?;
            Some(format!("{name} {features}"))
        })
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn krate(name: &str, layer: &str, deps: &[&str]) -> Crate {
        Crate {
            name: name.to_owned(),
            layer: layer.to_owned(),
            pure: false,
            adapter_features: vec!["tokio".to_owned()],
            features: vec!["tokio".to_owned(), "test-util".to_owned()],
            internal_deps: deps.iter().map(|d| (*d).to_owned()).collect(),
        }
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter()
            .map(|n| {
                if n.contains(' ') {
                    (*n).to_owned()
                } else {
                    format!("{n} default")
                }
            })
            .collect()
    }

    #[test]
    fn policy_on_backend_is_refused_and_on_port_allowed() {
        let layers = BTreeMap::from([
            ("nanobot-llm-port", "port"),
            ("nanobot-store-postgres", "backend"),
            ("nanobot-memory-core", "policy"),
        ]);
        let policy = krate(
            "nanobot-memory-core",
            "policy",
            &["nanobot-llm-port", "nanobot-store-postgres"],
        );
        let problems = internal_violations(&policy, &layers);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("nanobot-store-postgres"));
    }

    #[test]
    fn policy_on_policy_is_refused_and_the_turn_may_compose_them() {
        let layers = BTreeMap::from([
            ("nanobot-memory-core", "policy"),
            ("dream", "policy"),
            ("nanobot-turn", "turn"),
        ]);
        let policy = krate("dream", "policy", &["nanobot-memory-core"]);
        let problems = internal_violations(&policy, &layers);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("policy `nanobot-memory-core`"));
        let turn = krate("nanobot-turn", "turn", &["nanobot-memory-core", "dream"]);
        assert!(internal_violations(&turn, &layers).is_empty());
    }

    #[test]
    fn the_assembly_sits_between_the_turn_and_the_app() {
        let layers = BTreeMap::from([
            ("nanobot-turn", "turn"),
            ("nanobot-store-postgres", "backend"),
            ("nanobot-memory", "assembly"),
            ("nanobot-app", "app"),
        ]);
        let assembly = krate(
            "nanobot-memory",
            "assembly",
            &["nanobot-turn", "nanobot-store-postgres"],
        );
        assert!(internal_violations(&assembly, &layers).is_empty());
        let upward = krate("nanobot-memory", "assembly", &["nanobot-app"]);
        assert_eq!(internal_violations(&upward, &layers).len(), 1);
        let turn = krate("nanobot-turn", "turn", &["nanobot-memory"]);
        assert_eq!(internal_violations(&turn, &layers).len(), 1);
        let app = krate("nanobot-app", "app", &["nanobot-memory"]);
        assert!(internal_violations(&app, &layers).is_empty());
    }

    #[test]
    fn port_on_policy_is_refused() {
        let layers = BTreeMap::from([
            ("nanobot-llm-port", "port"),
            ("nanobot-memory-core", "policy"),
        ]);
        let port = krate("nanobot-llm-port", "port", &["nanobot-memory-core"]);
        assert_eq!(internal_violations(&port, &layers).len(), 1);
    }

    #[test]
    fn runtime_only_behind_a_declared_adapter_feature() {
        let port = krate("nanobot-llm-port", "port", &[]);
        let clean = ExternalTrees {
            default: names(&["serde"]),
            without_adapters: names(&["serde", "mockall"]),
            all: names(&["serde", "mockall", "tokio"]),
            bare: names(&["serde"]),
        };
        assert!(external_violations(&port, &clean).is_empty());

        let leaky = ExternalTrees {
            default: names(&["serde", "tokio"]),
            without_adapters: names(&["serde", "tokio"]),
            all: names(&["serde", "tokio", "reqwest", "sqlx"]),
            bare: names(&["serde"]),
        };
        let problems = external_violations(&port, &leaky);
        assert_eq!(problems.len(), 4, "{problems:?}");
    }

    #[test]
    fn tokio_sync_primitives_are_not_a_runtime() {
        let port = krate("nanobot-session-store", "port", &[]);
        let sync_only = ExternalTrees {
            default: names(&["tokio sync"]),
            without_adapters: names(&["tokio sync"]),
            all: names(&["tokio sync"]),
            bare: names(&["serde"]),
        };
        assert!(external_violations(&port, &sync_only).is_empty());
        let executor = ExternalTrees {
            default: names(&["tokio sync,rt"]),
            without_adapters: names(&["tokio sync"]),
            all: names(&["tokio sync,rt"]),
            bare: names(&["serde"]),
        };
        assert_eq!(external_violations(&port, &executor).len(), 1);
    }

    #[test]
    fn git_and_the_tokenizer_only_through_a_feature() {
        let port = krate("nanobot-memory-store", "port", &[]);
        let heavy = ExternalTrees {
            default: names(&["serde", "gix"]),
            without_adapters: names(&["serde", "gix"]),
            all: names(&["serde", "gix", "bpe-openai"]),
            bare: names(&["serde", "bpe-openai"]),
        };
        let problems = external_violations(&port, &heavy);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("bpe-openai"), "{problems:?}");
    }

    #[test]
    fn crates_without_a_layer_are_refused() {
        let metadata = json!({"packages": [{"name": "x", "metadata": null, "dependencies": []}]});
        let error = parse_crates(&metadata).unwrap_err();
        assert!(error.contains("does not name its layer"), "{error}");
    }

    #[test]
    fn metadata_is_read_with_dev_dependencies_ignored() {
        let metadata = json!({"packages": [
            {"name": "nanobot-llm-port", "features": {"default": [], "tokio": ["dep:tokio"]},
             "metadata": {"nanobot": {"layer": "port", "adapter-features": ["tokio"]}},
             "dependencies": [{"name": "nanobot-bench-workload", "kind": "dev"}, {"name": "serde", "kind": null}]},
            {"name": "nanobot-bench-workload", "features": {}, "metadata": {"nanobot": {"layer": "support"}},
             "dependencies": []}
        ]});
        let crates = parse_crates(&metadata).unwrap();
        assert_eq!(crates[0].features, ["tokio"]);
        assert_eq!(crates[0].adapter_features, ["tokio"]);
        assert!(crates[0].internal_deps.is_empty());
    }
}
