//! `delegate`: hand a sub-task to another soul.
//!
//! The tool itself can do nothing (tier `read`): every call of the child task is decided
//! on its own, under the stricter of both souls. Running a task is the agent loop's
//! business, one layer up, so the loop hands the tool a [`Subagents`] in its context;
//! without one (a delegate of a delegate, a soul with no `delegates`) the call fails
//! with an error that says why.

use futures::FutureExt;
use serde_json::json;

use super::util::{opt_u64, str_arg};
use super::{Tool, ToolContext, ToolError, ToolFuture};
use crate::catalog::ToolInfo;

/// What the model asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelegateRequest {
    pub soul: String,
    pub prompt: String,
    pub max_iterations: Option<u32>,
}

/// Runs child tasks for one parent task (implemented by the agent loop).
pub trait Subagents: Send + Sync {
    /// Runs the child to its end; the text is what the parent's model reads (status
    /// and final answer). Stops promptly when `ctx.cancel` fires.
    fn run(&self, request: DelegateRequest, ctx: ToolContext) -> ToolFuture;
}

pub struct Delegate;

impl Tool for Delegate {
    fn info(&self) -> &'static ToolInfo {
        &crate::catalog::DELEGATE
    }

    fn description(&self) -> &'static str {
        "Hand a self-contained sub-task to another soul (one of those listed in your \
         rules) and get its final answer. The other soul starts with nothing but your \
         prompt: say everything it needs. It works under the stricter of your rules and \
         its own, and its work counts against your budget."
    }

    fn schema(&self) -> serde_json::Value {
        json!({
            "type": "object",
            "properties": {
                "soul": {"type": "string", "description": "the soul to hand the sub-task to"},
                "prompt": {"type": "string", "description": "the sub-task, complete in itself"},
                "max_iterations": {"type": "integer", "minimum": 1, "description": "at most this many model calls for it"}
            },
            "required": ["soul", "prompt"]
        })
    }

    fn execute(&self, args: serde_json::Value, ctx: ToolContext) -> ToolFuture {
        async move {
            let soul = str_arg(&args, "soul")?.trim().to_owned();
            let prompt = str_arg(&args, "prompt")?.trim().to_owned();
            if prompt.is_empty() {
                return Err(ToolError::model(
                    "`prompt` is empty: say what the sub-task is",
                ));
            }
            let max_iterations = match opt_u64(&args, "max_iterations")? {
                Some(0) => {
                    return Err(ToolError::model("`max_iterations` must be at least 1"));
                }
                Some(n) => Some(u32::try_from(n).unwrap_or(u32::MAX)),
                None => None,
            };
            let Some(subagents) = ctx.subagents.clone() else {
                return Err(ToolError::model(
                    "delegation is not available in this task: a delegated sub-task cannot \
                     delegate further (sub-tasks nest at most 2 deep). Do the work yourself \
                     or report back what is left.",
                ));
            };
            subagents
                .run(
                    DelegateRequest {
                        soul,
                        prompt,
                        max_iterations,
                    },
                    ctx,
                )
                .await
        }
        .boxed()
    }
}
