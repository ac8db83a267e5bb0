//! `[sandbox]` of a soul file: the trees its tools read and write (absolute, `~/`
//! expanded), the closed places they may write only as named `startup` files, where
//! they may delete for good, the sockets they reach (never the session bus's whole) and
//! the bus names they talk to through the filtering proxy. Each error names the file,
//! the line and the key, and says what to write instead.

use std::path::{Path, PathBuf};

use toml::Spanned;

use super::{Fields, SandboxToml};
use crate::config::expand_home;
use crate::error::FileError;
use crate::policy::closed::Closed;
use crate::sandbox::SandboxSpec;

impl Fields<'_> {
    /// `[sandbox]`: absolute paths (`~/` expanded); reads the home by default.
    pub(in crate::soul) fn sandbox(&self, sb: SandboxToml) -> Result<SandboxSpec, FileError> {
        let closed = Closed::from_env(self.home);
        let startup = self.startup(sb.startup, &closed)?;
        let write = self.write(sb.write, &closed, &startup)?;
        Ok(SandboxSpec {
            read: self.paths(sb.read, &["~"])?,
            network: sb.network.unwrap_or(false),
            udp: sb.udp.unwrap_or(false),
            require: sb.require.unwrap_or(false),
            destroy: self.destroy(sb.destroy, &write, &startup)?,
            write,
            startup,
            sockets: self.sockets(sb.sockets)?,
            bus_talk: self.bus_talk(sb.bus_talk)?,
        })
    }

    /// `[sandbox] sockets`: absolute paths, never the session bus's, which a soul
    /// reaches through `bus_talk` (filtered) or not at all.
    fn sockets(&self, list: Option<Vec<Spanned<String>>>) -> Result<Vec<PathBuf>, FileError> {
        let spans: Vec<_> = list.iter().flatten().map(|p| p.span()).collect();
        let paths = self.paths(list, &[])?;
        let bus = crate::sandbox::busproxy::session_bus_sockets();
        for (path, span) in paths.iter().zip(spans) {
            let resolved = path.canonicalize().unwrap_or_else(|_| path.clone());
            if bus.contains(path) || bus.contains(&resolved) {
                return Err(self.at(
                    span,
                    format!(
                        "`{}` is the session bus: a raw grant would let the tools call anything on it (UpdateActivationEnvironment puts code into every service it starts later); list the names the tools may talk to in `bus_talk = [\"org.freedesktop.Notifications\"]` instead (docs/sandbox.md)",
                        path.display()
                    ),
                ));
            }
        }
        Ok(paths)
    }

    /// `[sandbox] bus_talk`: well-known bus names, each once
    /// ([`crate::sandbox::busproxy::check_name`]).
    fn bus_talk(&self, list: Option<Vec<Spanned<String>>>) -> Result<Vec<String>, FileError> {
        let mut out: Vec<String> = Vec::new();
        for name in list.into_iter().flatten() {
            crate::sandbox::busproxy::check_name(name.get_ref())
                .map_err(|why| self.at(name.span(), why.to_string()))?;
            if !out.contains(name.get_ref()) {
                out.push(name.into_inner());
            }
        }
        Ok(out)
    }

    /// `[sandbox] destroy`: trees where the tools may delete and truncate for good,
    /// each inside a writable tree (`write` or `startup`).
    fn destroy(
        &self,
        list: Option<Vec<Spanned<String>>>,
        write: &[PathBuf],
        startup: &[PathBuf],
    ) -> Result<Vec<PathBuf>, FileError> {
        let spans: Vec<_> = list.iter().flatten().map(|p| p.span()).collect();
        let paths = self.paths(list, &[])?;
        for (path, span) in paths.iter().zip(spans) {
            if !write.iter().chain(startup).any(|w| path.starts_with(w)) {
                return Err(self.at(
                    span,
                    format!(
                        "`{}` is not writable: list it (or a tree around it) in `write` first",
                        path.display()
                    ),
                ));
            }
        }
        Ok(paths)
    }

    /// `[sandbox] write`: none inside a closed place (`policy::closed`) but a data
    /// directory beneath `$XDG_DATA_HOME`; those are named in `startup`, exactly.
    fn write(
        &self,
        list: Option<Vec<Spanned<String>>>,
        closed: &Closed,
        startup: &[PathBuf],
    ) -> Result<Vec<PathBuf>, FileError> {
        let spans: Vec<_> = list.iter().flatten().map(|p| p.span()).collect();
        let paths = self.paths(list, &[])?;
        for (path, span) in paths.iter().zip(spans) {
            if closed.admits_really(path, startup) {
                continue;
            }
            let why = closed
                .place_of(path)
                .map_or("it holds start-up files", |p| p.why.words());
            return Err(self.at(
                span,
                format!(
                    "`{}` is closed ({why}): a tool could plant something there that runs outside the sandbox later; name the exact files or directories the soul needs in `[sandbox] startup`",
                    path.display()
                ),
            ));
        }
        Ok(paths)
    }

    /// `[sandbox] startup`: each a path inside a closed place (`policy::closed`), never
    /// a place whole, which the soul's tools may then write (a start-up file's writes
    /// still asked each time).
    fn startup(
        &self,
        list: Option<Vec<Spanned<String>>>,
        closed: &Closed,
    ) -> Result<Vec<PathBuf>, FileError> {
        let spans: Vec<_> = list.iter().flatten().map(|p| p.span()).collect();
        let paths = self.paths(list, &[])?;
        for (path, span) in paths.iter().zip(spans) {
            if let Some(why) = closed.refuses_as_startup(path) {
                return Err(self.at(span, why));
            }
        }
        Ok(paths)
    }

    fn paths(
        &self,
        list: Option<Vec<Spanned<String>>>,
        default: &[&str],
    ) -> Result<Vec<PathBuf>, FileError> {
        let list = match list {
            Some(l) => l,
            None => default
                .iter()
                .map(|s| Spanned::new(0..0, (*s).to_owned()))
                .collect(),
        };
        list.into_iter()
            .map(|p| {
                let expanded = expand_home(Path::new(p.get_ref()), self.home);
                if expanded.is_absolute() {
                    Ok(expanded)
                } else {
                    Err(self.at(
                        p.span(),
                        format!("`{}` must be absolute or start with ~/", p.get_ref()),
                    ))
                }
            })
            .collect()
    }
}
