//! Tools the model can call.
//!
//! The names, tiers and argument keys are part of the contract (souls and models name
//! them): [`crate::catalog::CATALOG`] is the one list of them. A [`Tool`] implements
//! one entry; the [`Registry`] holds the implemented ones and tells the loop which of a
//! soul's allowlist to offer.
//! Errors say who receives them: [`ToolError::RespondToModel`] goes back to the model
//! as a tool error it can correct, [`ToolError::Fatal`] ends the task.

pub mod bus;
pub mod changes;
pub mod delegate;
pub mod desktop;
mod disk;
mod files;
pub mod hypr;
pub mod journald;
mod memory;
pub mod notify;
pub mod open;
pub mod power;
mod process;
pub mod screen;
mod search;
mod shell;
mod system;
pub mod systemd;
mod trash;
pub mod typing;
pub mod ui;
mod util;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use familiar_protocol::ids::{SessionId, SoulId};
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::catalog::ToolInfo;
use crate::llm::ToolDef;
use crate::sandbox::{SandboxError, SandboxLauncher, SandboxPolicy};
use crate::snapshot::Snapshotter;
use crate::store::Memory;

/// What a running tool may use.
#[derive(Clone)]
pub struct ToolContext {
    /// The task's writable root; relative paths resolve against it.
    pub workspace: PathBuf,
    pub home: PathBuf,
    pub snapshotter: Arc<Mutex<Snapshotter>>,
    pub cancel: CancellationToken,
    /// The kernel rules every file access and program of this task runs under.
    pub sandbox: Arc<SandboxPolicy>,
    pub launcher: Arc<SandboxLauncher>,
    /// The task's soul and session: what `remember` records an entry under.
    pub soul: SoulId,
    pub session: SessionId,
    pub memory: Memory,
    /// Runs `delegate`'s sub-tasks; `None` where the task may not delegate (a
    /// delegated sub-task itself).
    pub subagents: Option<Arc<dyn delegate::Subagents>>,
    /// Where the task records what it changes outside its workspace, and keeps what
    /// that replaced (issue 40, undo); `None` where nothing is recorded (a test).
    pub changes: Option<changes::ChangeLog>,
    /// Where this session's screenshots are kept, and their size.
    pub screen: screen::ScreenPlace,
    /// The window that had the focus when the person was asked about this call
    /// ([`Described::focus`]); `None` for a call nobody was asked about.
    pub asked_focus: Option<crate::compositor::Window>,
}

impl ToolContext {
    /// `~`, `~/x` and relative paths made absolute (no symlink resolution: the policy
    /// check and the sandbox do that).
    pub fn resolve(&self, path: &str) -> PathBuf {
        let p = crate::config::expand_home(Path::new(path), &self.home);
        if p.is_absolute() {
            p
        } else {
            self.workspace.join(p)
        }
    }
}

/// Who a tool error is for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// The model can fix this and try again (bad path, bad arguments, not found).
    #[error("{0}")]
    RespondToModel(String),
    /// The task cannot go on (the sandbox could not be set up, the tool is broken).
    #[error("{0}")]
    Fatal(String),
}

impl ToolError {
    pub fn model(msg: impl Into<String>) -> Self {
        ToolError::RespondToModel(msg.into())
    }
}

/// A sandbox failure as the model or the task sees it, the same for every tool: a
/// cancelled call and a kernel that cannot enforce what the soul requires are answers
/// the model reads (the task goes on, the call did nothing); a helper that could not be
/// started or answered garbage means the tools are broken, and the task ends.
impl From<SandboxError> for ToolError {
    fn from(e: SandboxError) -> Self {
        match e {
            SandboxError::Cancelled => ToolError::model("cancelled: the task was stopped"),
            SandboxError::NotEnforced(_) => ToolError::model(format!(
                "refused: {e}; this soul's tools do not run on this kernel"
            )),
            e @ SandboxError::Trash { .. } => ToolError::model(e.to_string()),
            e @ (SandboxError::Workspace { .. }
            | SandboxError::CurrentExe(_)
            | SandboxError::Spawn { .. }
            | SandboxError::Wait(_)
            | SandboxError::Spec(_)
            | SandboxError::Setup(_)
            | SandboxError::Helper { .. }
            | SandboxError::Reply(_)
            | SandboxError::BusProxy(_)) => ToolError::Fatal(format!("the sandbox failed: {e}")),
        }
    }
}

/// One implemented tool.
pub trait Tool: Send + Sync {
    fn info(&self) -> &'static ToolInfo;

    /// What the model reads to decide whether to call it.
    fn description(&self) -> &'static str;

    /// JSON schema of the arguments object.
    fn schema(&self) -> serde_json::Value;

    /// Whether this call changes anything. When in doubt it does.
    fn is_mutating(&self, _args: &serde_json::Value) -> bool {
        self.info().mutating
    }

    /// Whether the tool can work here at all (a compositor running, a journal present).
    /// Unavailable tools are not offered to the model.
    fn available(&self) -> bool {
        true
    }

    /// Runs the call. Must stop promptly when `ctx.cancel` fires.
    fn execute(&self, args: serde_json::Value, ctx: ToolContext) -> ToolFuture;

    /// Runs the call for the loop: [`Tool::execute`]'s text, and an image for a tool
    /// that returns one (`screenshot`).
    fn run(&self, args: serde_json::Value, ctx: ToolContext) -> OutputFuture {
        use futures::FutureExt;
        self.execute(args, ctx)
            .map(|r| r.map(ToolOutput::text))
            .boxed()
    }

    /// What an approval of this call shows, when the tool can say it better than the
    /// arguments do (the app and the control a `ui_act` id names, found now); `None`
    /// keeps the rendering of the arguments. An error ends the call unasked: there is
    /// nothing to approve (the control is gone).
    fn describe(&self, _args: &serde_json::Value) -> Option<DescribeFuture> {
        None
    }

    /// Whether the audit line of a call carries the call as its approval showed it and
    /// what came of it (`type_text`: the text, the keys, the window, typed or why not),
    /// rather than only the digest of its arguments.
    fn audited_in_full(&self) -> bool {
        false
    }
}

/// What an approval shows of a call, from [`Tool::describe`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Described {
    pub summary: String,
    /// The window that has the focus now, for a call that must find it still focused
    /// when it runs (`type_text`); the dispatcher hands it back in
    /// [`ToolContext::asked_focus`].
    pub focus: Option<crate::compositor::Window>,
}

impl From<String> for Described {
    fn from(summary: String) -> Described {
        Described {
            summary,
            focus: None,
        }
    }
}

/// What [`Tool::describe`] resolves to.
pub type DescribeFuture = BoxFuture<'static, Result<Described, ToolError>>;

/// What a running call resolves to: the text for the model, or who receives the error.
pub type ToolFuture = BoxFuture<'static, Result<String, ToolError>>;

/// What [`Tool::run`] resolves to.
pub type OutputFuture = BoxFuture<'static, Result<ToolOutput, ToolError>>;

/// A call's result for the loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    pub text: String,
    pub image: Option<ImageFile>,
}

impl ToolOutput {
    pub fn text(text: String) -> ToolOutput {
        ToolOutput { text, image: None }
    }
}

/// An image a tool saved for the model (under [`ToolContext::screens`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageFile {
    pub path: PathBuf,
    pub media_type: &'static str,
    pub width: u32,
    pub height: u32,
}

/// The implemented tools.
pub struct Registry {
    tools: BTreeMap<&'static str, Arc<dyn Tool>>,
}

impl Registry {
    /// Every tool this build implements.
    pub fn builtin() -> Registry {
        let tools: Vec<Arc<dyn Tool>> = vec![
            Arc::new(files::ReadFile),
            Arc::new(files::ListDir),
            Arc::new(files::WriteFile),
            Arc::new(files::EditFile),
            Arc::new(trash::Trash),
            Arc::new(search::SearchFiles),
            Arc::new(disk::DiskUsage),
            Arc::new(journald::Journal::detect()),
            Arc::new(shell::Shell),
            Arc::new(process::KillProcess),
            Arc::new(open::Open::detect()),
            Arc::new(system::SystemSnapshot),
            Arc::new(system::ProcessList),
            Arc::new(desktop::DesktopState {
                locate: desktop::locate_from_env(),
            }),
            Arc::new(desktop::DesktopDispatch {
                locate: desktop::locate_from_env(),
            }),
            Arc::new(screen::Screenshot::session()),
            Arc::new(ui::UiRead {
                ui: ui::Ui::session(),
            }),
            Arc::new(ui::UiAct {
                ui: ui::Ui::session(),
            }),
            Arc::new(typing::TypeText::session()),
            Arc::new(hypr::HyprState {
                locate: hypr::locate_from_env(),
            }),
            Arc::new(hypr::HyprDispatch {
                locate: hypr::locate_from_env(),
            }),
            Arc::new(systemd::SystemdUser::session()),
            Arc::new(notify::Notify::session()),
            Arc::new(power::Power::system()),
            Arc::new(delegate::Delegate),
            Arc::new(memory::Remember),
            Arc::new(memory::Forget),
        ];
        Registry {
            tools: tools.into_iter().map(|t| (t.info().name, t)).collect(),
        }
    }

    /// An empty registry plus `tools` (tests).
    pub fn with(tools: Vec<Arc<dyn Tool>>) -> Registry {
        Registry {
            tools: tools.into_iter().map(|t| (t.info().name, t)).collect(),
        }
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// The tools offered to a soul: in its allowlist, implemented, and available here,
    /// in the allowlist's order.
    pub fn offered(&self, allowlist: &[String]) -> Vec<Arc<dyn Tool>> {
        allowlist
            .iter()
            .filter_map(|name| self.tools.get(name.as_str()))
            .filter(|t| t.available())
            .cloned()
            .collect()
    }

    /// Definitions for the model request.
    pub fn definitions(&self, allowlist: &[String]) -> Vec<ToolDef> {
        self.offered(allowlist)
            .iter()
            .map(|t| ToolDef {
                name: t.info().name.to_owned(),
                description: t.description().to_owned(),
                input_schema: t.schema(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use familiar_sandbox::status::Enforcement;

    use super::*;

    #[test]
    fn sandbox_errors_map_the_same_for_every_tool() {
        assert_eq!(
            ToolError::from(SandboxError::Cancelled),
            ToolError::model("cancelled: the task was stopped")
        );
        let none = Enforcement::for_abi(None);
        match ToolError::from(SandboxError::NotEnforced(none)) {
            ToolError::RespondToModel(m) => {
                assert!(
                    m.starts_with("refused: the soul requires a fully enforced sandbox"),
                    "{m}"
                );
                assert!(
                    m.ends_with("this soul's tools do not run on this kernel"),
                    "{m}"
                );
            }
            ToolError::Fatal(m) => panic!("a kernel without Landlock is not fatal: {m}"),
        }
        assert_eq!(
            ToolError::from(SandboxError::Setup("no ruleset".to_owned())),
            ToolError::Fatal(
                "the sandbox failed: the sandbox could not be set up: no ruleset".to_owned()
            )
        );
        assert!(matches!(
            ToolError::from(SandboxError::Reply("eof".to_owned())),
            ToolError::Fatal(_)
        ));
    }
}
