//! What a task may still spend, shared along a chain of delegated tasks.
//!
//! Each task has a [`Budget`] of model calls and tokens; a delegated child's budget
//! points at its parent's. Spending counts in the task's own budget and in every
//! ancestor's, and a task is out of budget when any budget on its chain is: so a
//! child's work comes out of what the parent has left, a child never gets more than
//! that, and children running side by side draw on the same remainder.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Which limit ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exhausted {
    Iterations { used: u32, max: u32 },
    Tokens { used: u64, max: u64 },
}

#[derive(Debug)]
pub struct Budget {
    max_iterations: u32,
    max_tokens: u64,
    iterations: AtomicU32,
    tokens: AtomicU64,
    parent: Option<Arc<Budget>>,
}

impl Budget {
    /// A top-level task's budget.
    pub fn root(max_iterations: u32, max_tokens: u64) -> Arc<Budget> {
        Arc::new(Budget {
            max_iterations,
            max_tokens,
            iterations: AtomicU32::new(0),
            tokens: AtomicU64::new(0),
            parent: None,
        })
    }

    /// A child's budget: at most `max_iterations` and `max_tokens`, and never more than
    /// this chain has left.
    pub fn child(self: &Arc<Self>, max_iterations: u32, max_tokens: u64) -> Arc<Budget> {
        Arc::new(Budget {
            max_iterations: max_iterations.min(self.iterations_left()),
            max_tokens: max_tokens.min(self.tokens_left()),
            iterations: AtomicU32::new(0),
            tokens: AtomicU64::new(0),
            parent: Some(Arc::clone(self)),
        })
    }

    pub fn max_iterations(&self) -> u32 {
        self.max_iterations
    }

    pub fn max_tokens(&self) -> u64 {
        self.max_tokens
    }

    /// Model calls made by this task and its children.
    pub fn iterations_used(&self) -> u32 {
        self.iterations.load(Ordering::SeqCst)
    }

    /// Tokens spent by this task and its children.
    pub fn tokens_used(&self) -> u64 {
        self.tokens.load(Ordering::SeqCst)
    }

    /// Counts one model call here and in every ancestor.
    pub fn spend_iteration(&self) {
        self.iterations.fetch_add(1, Ordering::SeqCst);
        if let Some(p) = &self.parent {
            p.spend_iteration();
        }
    }

    /// Counts `n` tokens here and in every ancestor.
    pub fn spend_tokens(&self, n: u64) {
        self.tokens.fetch_add(n, Ordering::SeqCst);
        if let Some(p) = &self.parent {
            p.spend_tokens(n);
        }
    }

    /// Model calls left on the whole chain.
    pub fn iterations_left(&self) -> u32 {
        let own = self.max_iterations.saturating_sub(self.iterations_used());
        self.parent
            .as_ref()
            .map_or(own, |p| own.min(p.iterations_left()))
    }

    /// Tokens left on the whole chain.
    pub fn tokens_left(&self) -> u64 {
        let own = self.max_tokens.saturating_sub(self.tokens_used());
        self.parent
            .as_ref()
            .map_or(own, |p| own.min(p.tokens_left()))
    }

    /// The first exhausted budget on the chain, this task's own first.
    pub fn exhausted(&self) -> Option<Exhausted> {
        let (used, max) = (self.tokens_used(), self.max_tokens);
        if used >= max {
            return Some(Exhausted::Tokens { used, max });
        }
        let (used, max) = (self.iterations_used(), self.max_iterations);
        if used >= max {
            return Some(Exhausted::Iterations { used, max });
        }
        self.parent.as_ref().and_then(|p| p.exhausted())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_gets_at_most_what_the_parent_has_left() {
        let parent = Budget::root(10, 1000);
        parent.spend_iteration();
        parent.spend_tokens(400);
        let child = parent.child(50, 5000);
        assert_eq!((child.max_iterations(), child.max_tokens()), (9, 600));
        let small = parent.child(2, 100);
        assert_eq!((small.max_iterations(), small.max_tokens()), (2, 100));
    }

    #[test]
    fn a_childs_spending_comes_out_of_the_parents_budget() {
        let parent = Budget::root(10, 1000);
        let child = parent.child(5, 1000);
        for _ in 0..3 {
            child.spend_iteration();
        }
        child.spend_tokens(700);
        assert_eq!(parent.iterations_used(), 3);
        assert_eq!(parent.tokens_left(), 300);
        assert_eq!(child.iterations_left(), 2);
        // A sibling started now sees only the remainder.
        let sibling = parent.child(100, 1000);
        assert_eq!(sibling.max_tokens(), 300);
        sibling.spend_tokens(300);
        assert_eq!(
            parent.exhausted(),
            Some(Exhausted::Tokens {
                used: 1000,
                max: 1000
            })
        );
        // The first child is out too: its parent has nothing left.
        assert!(child.exhausted().is_some());
    }

    #[test]
    fn own_limits_are_reported_first() {
        let parent = Budget::root(10, 1000);
        let child = parent.child(1, 1000);
        assert_eq!(child.exhausted(), None);
        child.spend_iteration();
        assert_eq!(
            child.exhausted(),
            Some(Exhausted::Iterations { used: 1, max: 1 })
        );
        assert_eq!(parent.exhausted(), None);
    }
}
