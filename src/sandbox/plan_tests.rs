//! Unit tests of the plan: carving and the refresh rule.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use super::*;

fn tree() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    for d in [".ssh", ".config/familiar", ".config/nvim", "src"] {
        std::fs::create_dir_all(t.path().join(d)).unwrap();
    }
    for f in [".ssh/id_ed25519", ".netrc", ".bashrc", ".config/familiar/x"] {
        std::fs::write(t.path().join(f), "x").unwrap();
    }
    t
}

fn sorted(mut v: Vec<PathBuf>) -> Vec<PathBuf> {
    v.sort();
    v
}

#[test]
fn a_tree_without_protected_paths_is_granted_whole() {
    let t = tree();
    let root = t.path().canonicalize().unwrap();
    let e = expand(&root.join("src"), &[root.join(".ssh")]);
    assert_eq!(e.granted, [root.join("src")]);
    assert!(e.list_only.is_empty());
}

#[test]
fn protected_children_are_carved_out_recursively() {
    let t = tree();
    let h = t.path().canonicalize().unwrap();
    let protected = [h.join(".ssh"), h.join(".netrc"), h.join(".config/familiar")];
    let e = expand(&h, &protected);
    assert_eq!(
        sorted(e.granted),
        sorted(vec![
            h.join(".bashrc"),
            h.join(".config/nvim"),
            h.join("src")
        ])
    );
    assert_eq!(
        sorted(e.list_only),
        sorted(vec![h.clone(), h.join(".config")])
    );
}

#[test]
fn a_tree_inside_a_protected_path_is_not_granted() {
    let t = tree();
    let h = t.path().canonicalize().unwrap();
    assert_eq!(
        expand(&h.join(".ssh"), &[h.join(".ssh")]),
        Expansion::default()
    );
}

#[test]
fn symlinked_children_get_no_rule() {
    let t = tree();
    let h = t.path().canonicalize().unwrap();
    std::os::unix::fs::symlink(h.join(".ssh"), h.join("keys")).unwrap();
    let got = expand(&h, &[h.join(".ssh")]).granted;
    assert!(!got.contains(&h.join("keys")), "{got:?}");
}

#[test]
fn glob_components_in_protected_paths_match() {
    let t = tree();
    let h = t.path().canonicalize().unwrap();
    let got = expand(&h.join(".config"), &[h.join(".config/fam*")]).granted;
    assert_eq!(got, [h.join(".config/nvim")]);
}

/// Changes `dir` (a new entry) until its change time differs from `before`: on a
/// filesystem with coarse timestamps the first change may land in the same tick.
fn change(dir: &Path, before: &Witnesses) {
    for i in 0.. {
        std::fs::write(dir.join(format!("new{i}")), "x").unwrap();
        if !before.hold() {
            return;
        }
    }
}

fn home_plan(h: &Path) -> (Plan, Witnesses) {
    compute(
        &[h.to_owned()],
        &[h.join("src")],
        &[h.join(".ssh"), h.join(".netrc"), h.join(".aws")],
    )
}

fn grants(plan: &Plan, path: &Path) -> Option<Grant> {
    plan.rules
        .iter()
        .filter(|r| r.path == path)
        .map(|r| r.grant)
        .max()
}

#[test]
fn the_plan_carves_and_records_inodes() {
    let t = tree();
    let h = t.path().canonicalize().unwrap();
    let (plan, w) = home_plan(&h);
    assert_eq!(grants(&plan, &h), Some(Grant::ListDir));
    assert_eq!(grants(&plan, &h.join(".bashrc")), Some(Grant::Read));
    assert_eq!(grants(&plan, &h.join("src")), Some(Grant::Write));
    assert_eq!(grants(&plan, &h.join(".ssh")), None);
    let bashrc = plan
        .rules
        .iter()
        .find(|r| r.path == h.join(".bashrc"))
        .unwrap();
    let m = std::fs::symlink_metadata(h.join(".bashrc")).unwrap();
    assert_eq!((bashrc.dev, bashrc.ino), (m.dev(), m.ino()));
    assert!(w.hold());
}

#[test]
fn writing_inside_granted_trees_keeps_the_plan() {
    let t = tree();
    let h = t.path().canonicalize().unwrap();
    let (_, w) = home_plan(&h);
    std::fs::write(h.join("src/main.rs"), "fn main() {}").unwrap();
    std::fs::create_dir(h.join(".config/nvim/lua")).unwrap();
    std::fs::write(h.join(".bashrc"), "edited in place").unwrap();
    assert!(w.hold());
}

#[test]
fn a_new_entry_in_a_carved_directory_invalidates_the_plan() {
    let t = tree();
    let h = t.path().canonicalize().unwrap();
    let (_, w) = home_plan(&h);
    change(&h, &w);
    assert!(!w.hold());
}

#[test]
fn a_protected_path_appearing_or_repointed_invalidates_the_plan() {
    let t = tree();
    let h = t.path().canonicalize().unwrap();
    let (_, w) = home_plan(&h);
    // Missing when the plan was made: its appearance is seen.
    std::os::unix::fs::symlink(h.join("src"), h.join(".aws")).unwrap();
    assert!(!w.hold());
    let (plan, w) = home_plan(&h);
    // Now `src` is the target of a protected link: no rule at all.
    assert_eq!(grants(&plan, &h.join("src")), None);
    std::fs::remove_file(h.join(".aws")).unwrap();
    std::os::unix::fs::symlink(h.join(".config/nvim"), h.join(".aws")).unwrap();
    assert!(!w.hold());
}

#[test]
fn a_fresh_change_time_makes_the_plan_single_use() {
    let t = tree();
    let h = t.path().canonicalize().unwrap();
    let (_, mut w) = home_plan(&h);
    // The tree was made just now.
    assert!(w.racy());
    w.made += Duration::from_secs(10);
    assert!(!w.racy());
}

#[test]
fn the_cache_reuses_a_plan_until_a_witness_changes() {
    let t = tree();
    let h = t.path().canonicalize().unwrap();
    // No carved directory: nothing whose change time matters, so nothing racy.
    let (read, protected) = (vec![h.join("src")], vec![h.join(".aws")]);
    let cache = PlanCache::default();
    let first = cache.get(&read, &[], &protected, &[]);
    assert!(Arc::ptr_eq(&first, &cache.get(&read, &[], &protected, &[])));
    assert_eq!(grants(&first, &h.join("src")), Some(Grant::Read));
    // Different inputs never see another's plan.
    assert!(!Arc::ptr_eq(&first, &cache.get(&read, &[], &[], &[])));
    std::os::unix::fs::symlink(h.join("src"), h.join(".aws")).unwrap();
    let after = cache.get(&read, &[], &protected, &[]);
    assert_eq!(grants(&after, &h.join("src")), None);
}

#[test]
fn the_cache_keeps_several_sandboxes_and_drops_the_least_recently_used() {
    let t = tree();
    let h = t.path().canonicalize().unwrap();
    let protected = vec![h.join(".aws")];
    let cache = PlanCache::default();
    let first_read = vec![h.join("src")];
    let first = cache.get(&first_read, &[], &protected, &[]);
    // Another task's sandbox in between does not push the first one out.
    let other = cache.get(&[h.join("docs")], &[], &protected, &[]);
    assert!(!Arc::ptr_eq(&first, &other));
    assert!(Arc::ptr_eq(
        &first,
        &cache.get(&first_read, &[], &protected, &[])
    ));
    // A clone (a policy of another task sharing the daemon's cache) sees it too.
    assert!(Arc::ptr_eq(
        &first,
        &cache.clone().get(&first_read, &[], &protected, &[])
    ));
    // PLAN_CACHE_ENTRIES other sandboxes later, it has been dropped and is made again.
    for i in 0..PLAN_CACHE_ENTRIES {
        cache.get(&[h.join(format!("missing-{i}"))], &[], &protected, &[]);
    }
    let again = cache.get(&first_read, &[], &protected, &[]);
    assert!(!Arc::ptr_eq(&first, &again));
    assert_eq!(*first, *again);
}

#[test]
fn a_cleared_cache_makes_the_same_plan_again() {
    let t = tree();
    let h = t.path().canonicalize().unwrap();
    let (read, protected) = (vec![h.join("src")], vec![h.join(".aws")]);
    let cache = PlanCache::default();
    let first = cache.get(&read, &[], &protected, &[]);
    // Cleared through a clone: the daemon's tasks and its supervisor share one cache.
    cache.clone().clear();
    let again = cache.get(&read, &[], &protected, &[]);
    assert!(!Arc::ptr_eq(&first, &again));
    assert_eq!(*first, *again);
}

#[test]
fn write_protected_files_stay_readable_and_their_directory_gets_no_new_entries() {
    let t = tree();
    let h = t.path().canonicalize().unwrap();
    let bin = h.join(".local/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("familiar-sandbox"), "helper").unwrap();
    std::fs::write(bin.join("other"), "x").unwrap();
    let (plan, _) = compute_guarded(
        std::slice::from_ref(&h),
        std::slice::from_ref(&h),
        &[],
        &[bin.join("familiar-sandbox")],
    );
    // The home is writable, except the helper and its directory's own entries: the
    // directory is only listable for writes, its other files writable, and the whole
    // home (helper included) readable.
    assert!(
        plan.rules
            .iter()
            .any(|r| r.path == h && r.grant == Grant::Read)
    );
    assert_eq!(grants(&plan, &bin.join("other")), Some(Grant::Write));
    assert!(
        !plan
            .rules
            .iter()
            .any(|r| r.path.starts_with(bin.join("familiar-sandbox")) && r.grant == Grant::Write),
        "{plan:?}"
    );
    assert!(
        !plan
            .rules
            .iter()
            .any(|r| bin.starts_with(&r.path) && r.grant == Grant::Write),
        "no write rule on the directory or above it: {plan:?}"
    );
}
