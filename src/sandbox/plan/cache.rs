//! The plans of recent sandboxes, each reused while its witnesses hold.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use super::{Plan, Trees, Witnesses, compute_trees};

#[derive(Debug)]
struct Cached {
    read: Vec<PathBuf>,
    write: Vec<PathBuf>,
    destroy: Vec<PathBuf>,
    protected: Vec<PathBuf>,
    write_protected: Vec<PathBuf>,
    closed: Vec<PathBuf>,
    plan: Arc<Plan>,
    witnesses: Witnesses,
}

impl Cached {
    fn is_for(&self, t: &Trees<'_>) -> bool {
        self.read == t.read
            && self.write == t.write
            && self.destroy == t.destroy
            && self.protected == t.protected
            && self.write_protected == t.write_protected
            && self.closed == t.closed
    }
}

/// Plans kept at once: one per soul and workspace in use, the least recently used
/// dropped first.
pub const PLAN_CACHE_ENTRIES: usize = 16;

/// Plans of recent sandboxes, each kept while its witnesses hold. The daemon shares one
/// between tasks, so a task of a soul and workspace in use by another task starts with
/// its plan made (checked, not computed); it empties the cache when it goes idle
/// ([`PlanCache::clear`]). Cheap to share: clones see the same cache.
#[derive(Debug, Default, Clone)]
pub struct PlanCache {
    /// Most recently used last.
    inner: Arc<Mutex<Vec<Cached>>>,
}

impl PlanCache {
    /// Drops every plan. The daemon does this when its last task ends: a plan holds a
    /// few thousand small paths (its witnesses), and the plans made during a busy spell
    /// would otherwise sit spread over the heap and keep its pages from going back to
    /// the kernel (BENCHMARKS.md, "Idle memory"). The next task's first call makes its
    /// plan again (a few milliseconds, once per task).
    pub fn clear(&self) {
        let mut entries = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        *entries = Vec::new();
    }

    /// The plan for these trees, reused when nothing it depends on changed. Blocking:
    /// a few hundred `lstat`s when reused, a fresh [`compute`] otherwise.
    pub fn get(&self, trees: &Trees<'_>) -> Arc<Plan> {
        // One caller computes, the others wait and reuse.
        let mut entries = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let found = entries.iter().position(|c| c.is_for(trees));
        if let Some(i) = found {
            let c = entries.remove(i);
            match c.witnesses.changed() {
                None => {
                    let plan = c.plan.clone();
                    entries.push(c);
                    return plan;
                }
                Some(path) => {
                    tracing::debug!("sandbox plan made again: {} changed", path.display());
                }
            }
        }
        let (plan, witnesses) = compute_trees(trees);
        let plan = Arc::new(plan);
        if let Some(path) = witnesses.racy_path() {
            tracing::debug!(
                "sandbox plan not kept: {} changed too recently to trust",
                path.display()
            );
        } else {
            if entries.len() >= PLAN_CACHE_ENTRIES {
                entries.remove(0);
            }
            entries.push(Cached {
                read: trees.read.to_vec(),
                write: trees.write.to_vec(),
                destroy: trees.destroy.to_vec(),
                protected: trees.protected.to_vec(),
                write_protected: trees.write_protected.to_vec(),
                closed: trees.closed.to_vec(),
                plan: plan.clone(),
                witnesses,
            });
        }
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use familiar_sandbox::plan::Grant;

    use crate::sandbox::plan::tests::{grants, tree};

    #[test]
    fn the_cache_reuses_a_plan_until_a_witness_changes() {
        let t = tree();
        let h = t.path().canonicalize().unwrap();
        // No carved directory: nothing whose change time matters, so nothing racy.
        let (read, protected) = (vec![h.join("src")], vec![h.join(".aws")]);
        let cache = PlanCache::default();
        let first = cache.get(&Trees {
            read: &read,
            protected: &protected,
            ..Trees::default()
        });
        assert!(Arc::ptr_eq(
            &first,
            &cache.get(&Trees {
                read: &read,
                protected: &protected,
                ..Trees::default()
            })
        ));
        assert_eq!(grants(&first, &h.join("src")), Some(Grant::Read));
        // Different inputs never see another's plan.
        assert!(!Arc::ptr_eq(
            &first,
            &cache.get(&Trees {
                read: &read,
                ..Trees::default()
            })
        ));
        std::os::unix::fs::symlink(h.join("src"), h.join(".aws")).unwrap();
        let after = cache.get(&Trees {
            read: &read,
            protected: &protected,
            ..Trees::default()
        });
        assert_eq!(grants(&after, &h.join("src")), None);
    }

    #[test]
    fn the_cache_keeps_several_sandboxes_and_drops_the_least_recently_used() {
        let t = tree();
        let h = t.path().canonicalize().unwrap();
        let protected = vec![h.join(".aws")];
        let cache = PlanCache::default();
        let first_read = vec![h.join("src")];
        let first = cache.get(&Trees {
            read: &first_read,
            protected: &protected,
            ..Trees::default()
        });
        // Another task's sandbox in between does not push the first one out.
        let other = cache.get(&Trees {
            read: &[h.join("docs")],
            protected: &protected,
            ..Trees::default()
        });
        assert!(!Arc::ptr_eq(&first, &other));
        assert!(Arc::ptr_eq(
            &first,
            &cache.get(&Trees {
                read: &first_read,
                protected: &protected,
                ..Trees::default()
            })
        ));
        // A clone (a policy of another task sharing the daemon's cache) sees it too.
        assert!(Arc::ptr_eq(
            &first,
            &cache.clone().get(&Trees {
                read: &first_read,
                protected: &protected,
                ..Trees::default()
            })
        ));
        // PLAN_CACHE_ENTRIES other sandboxes later, it has been dropped and is made again.
        for i in 0..PLAN_CACHE_ENTRIES {
            cache.get(&Trees {
                read: &[h.join(format!("missing-{i}"))],
                protected: &protected,
                ..Trees::default()
            });
        }
        let again = cache.get(&Trees {
            read: &first_read,
            protected: &protected,
            ..Trees::default()
        });
        assert!(!Arc::ptr_eq(&first, &again));
        assert_eq!(*first, *again);
    }

    #[test]
    fn a_cleared_cache_makes_the_same_plan_again() {
        let t = tree();
        let h = t.path().canonicalize().unwrap();
        let (read, protected) = (vec![h.join("src")], vec![h.join(".aws")]);
        let cache = PlanCache::default();
        let first = cache.get(&Trees {
            read: &read,
            protected: &protected,
            ..Trees::default()
        });
        // Cleared through a clone: the daemon's tasks and its supervisor share one cache.
        cache.clone().clear();
        let again = cache.get(&Trees {
            read: &read,
            protected: &protected,
            ..Trees::default()
        });
        assert!(!Arc::ptr_eq(&first, &again));
        assert_eq!(*first, *again);
    }
}
