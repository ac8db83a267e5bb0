//! A turn's tool calls, from the model's stream to their results in the conversation.
//!
//! Each complete call passes the task's [`gate`] (policy, the sandbox rule, quotas), is
//! reported, and goes to the [`dispatch`]er, which runs it (in parallel or in order)
//! while the model is still writing; the [`collector`] drives the stream, [`ending`]
//! folds the results back in call order and says how the model call ended, and
//! [`failure`] words a failed model call for the person. [`mcp`] is the task's MCP tools, offered per task and
//! decided like the built-ins.

pub(in crate::agent) mod collector;
pub mod dispatch;
pub(in crate::agent) mod ending;
pub(in crate::agent) mod failure;
pub(in crate::agent) mod gate;
pub(in crate::agent) mod mcp;
pub(in crate::agent) mod screen;
