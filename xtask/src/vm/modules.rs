//! Kernel module index files for the modules copied into the image. Debian's kernel package
//! has no `modules.dep` (its postinst runs `depmod`), and running busybox's `depmod` over all
//! 4,000 modules took 15 s, so the image builder reads the dependencies of just the chosen
//! modules from their `.modinfo` sections and this file writes the index `modprobe` reads.

use std::collections::{BTreeMap, BTreeSet};

/// What the image builder learned about one module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleInfo {
    /// Path relative to the modules directory, `kernel/drivers/md/raid456.ko`.
    pub path: String,
    /// Names of the modules it needs loaded first (`.modinfo` `depends=`).
    pub depends: Vec<String>,
    /// Other names `modprobe` accepts for it (`.modinfo` `alias=`, e.g. `md-level-5`).
    pub aliases: Vec<String>,
}

/// `md-mod.ko.xz` and `md_mod` name the same module.
pub fn module_name(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = file.split(".ko").next().unwrap_or(file);
    stem.replace('-', "_")
}

/// Splits a `.modinfo` section (`key=value` strings separated by NULs) into
/// (dependencies, aliases).
pub fn parse_modinfo(section: &[u8]) -> (Vec<String>, Vec<String>) {
    let mut depends = Vec::new();
    let mut aliases = Vec::new();
    for entry in section.split(|&byte| byte == 0) {
        let entry = String::from_utf8_lossy(entry);
        if let Some(list) = entry.strip_prefix("depends=") {
            depends.extend(
                list.split(',')
                    .filter(|name| !name.is_empty())
                    .map(module_name),
            );
        } else if let Some(alias) = entry.strip_prefix("alias=") {
            aliases.push(alias.to_string());
        }
    }
    (depends, aliases)
}

/// `modules.dep` and `modules.alias` for a set of modules closed under dependencies (keyed by
/// name). Each `modules.dep` line lists a module's dependencies, direct and indirect, in
/// reverse load order: `modprobe` loads them from the last to the first, then the module.
pub fn index_files(modules: &BTreeMap<String, ModuleInfo>) -> Result<(String, String), String> {
    let mut dep = String::new();
    let mut alias = String::new();
    for (name, info) in modules {
        let mut load_order = Vec::new();
        let mut visiting = BTreeSet::new();
        for dependency in &info.depends {
            post_order(modules, dependency, &mut visiting, &mut load_order)?;
        }
        load_order.reverse();
        let paths: Vec<&str> = load_order
            .iter()
            .map(|dependency| modules[dependency].path.as_str())
            .collect();
        dep.push_str(&info.path);
        dep.push(':');
        for path in paths {
            dep.push(' ');
            dep.push_str(path);
        }
        dep.push('\n');
        for other in &info.aliases {
            alias.push_str(&format!("alias {other} {name}\n"));
        }
    }
    Ok((dep, alias))
}

/// Appends `name`'s dependencies and then `name` itself, each once.
fn post_order(
    modules: &BTreeMap<String, ModuleInfo>,
    name: &str,
    visiting: &mut BTreeSet<String>,
    order: &mut Vec<String>,
) -> Result<(), String> {
    if order.iter().any(|done| done == name) {
        return Ok(());
    }
    if !visiting.insert(name.to_string()) {
        return Err(format!("dependency cycle through module {name}"));
    }
    let info = modules
        .get(name)
        .ok_or_else(|| format!("module {name} is needed but was not collected"))?;
    for dependency in &info.depends {
        post_order(modules, dependency, visiting, order)?;
    }
    order.push(name.to_string());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(path: &str, depends: &[&str], aliases: &[&str]) -> (String, ModuleInfo) {
        let info = ModuleInfo {
            path: path.to_string(),
            depends: depends.iter().map(|name| name.to_string()).collect(),
            aliases: aliases.iter().map(|name| name.to_string()).collect(),
        };
        (module_name(path), info)
    }

    #[test]
    fn parses_modinfo_strings() {
        let section = b"alias=md-level-5\0depends=md-mod,raid6_pq,\0license=GPL\0alias=raid5\0";
        assert_eq!(
            parse_modinfo(section),
            (
                vec!["md_mod".to_string(), "raid6_pq".to_string()],
                vec!["md-level-5".to_string(), "raid5".to_string()]
            )
        );
        assert_eq!(parse_modinfo(b"depends=\0"), (vec![], vec![]));
    }

    /// raid456 needs async_pq and md_mod; async_pq needs raid6_pq and async_tx; raid6_pq needs
    /// nothing. Load order worked out by hand: async_tx, raid6_pq, async_pq, md_mod (any
    /// order where each module follows what it needs); the line lists it reversed.
    #[test]
    fn lists_dependencies_in_reverse_load_order() {
        let modules: BTreeMap<String, ModuleInfo> = [
            module(
                "kernel/md/raid456.ko",
                &["async_pq", "md_mod"],
                &["md-level-5"],
            ),
            module("kernel/md/md-mod.ko", &[], &[]),
            module("kernel/async/async_pq.ko", &["raid6_pq", "async_tx"], &[]),
            module("kernel/async/async_tx.ko", &[], &[]),
            module("kernel/lib/raid6_pq.ko", &[], &[]),
        ]
        .into_iter()
        .collect();
        let (dep, alias) = index_files(&modules).unwrap();
        assert_eq!(
            dep,
            "kernel/async/async_pq.ko: kernel/async/async_tx.ko kernel/lib/raid6_pq.ko\n\
             kernel/async/async_tx.ko:\n\
             kernel/md/md-mod.ko:\n\
             kernel/md/raid456.ko: kernel/md/md-mod.ko kernel/async/async_pq.ko \
             kernel/async/async_tx.ko kernel/lib/raid6_pq.ko\n\
             kernel/lib/raid6_pq.ko:\n"
        );
        assert_eq!(alias, "alias md-level-5 raid456\n");
    }

    #[test]
    fn a_missing_dependency_or_a_cycle_is_an_error() {
        let missing: BTreeMap<String, ModuleInfo> =
            [module("kernel/a.ko", &["b"], &[])].into_iter().collect();
        assert!(index_files(&missing).is_err());
        let cycle: BTreeMap<String, ModuleInfo> = [
            module("kernel/a.ko", &["b"], &[]),
            module("kernel/b.ko", &["a"], &[]),
        ]
        .into_iter()
        .collect();
        assert!(index_files(&cycle).is_err());
    }
}
