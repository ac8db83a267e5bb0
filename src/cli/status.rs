//! `familiar status`: the daemon's version, uptime, tasks, metrics, sandbox and the
//! config it runs with, beside this client's own (they may differ), and the prefixes it
//! warmed.

use std::io::Write;

use familiar_protocol::query::{Configuration, SandboxReport, WarmState};

use super::client::{Failure, with_proxy};
use super::{Exit, Out};

/// What this machine says without asking the daemon: version, config file, provider
/// and model, the kernel's Landlock.
fn local_facts(config: Option<&std::path::Path>) -> serde_json::Value {
    let mut facts = serde_json::json!({
        "client_version": env!("CARGO_PKG_VERSION"),
        "landlock": crate::sandbox::report(&familiar_sandbox::status::probe()),
    });
    match crate::config::Config::load(config, &crate::config::ProcessEnv) {
        Ok(c) => {
            facts["config"] = serde_json::json!(c.source.as_ref().map(|p| p.display().to_string()));
            facts["provider"] = serde_json::json!(c.default_provider);
            facts["model"] = serde_json::json!(c.provider(None).ok().map(|p| p.model.clone()));
            facts["default_soul"] = serde_json::json!(c.default_soul.to_string());
            facts["data_dir"] = serde_json::json!(c.paths.data_dir);
        }
        Err(e) => facts["config_error"] = serde_json::json!(e.to_string()),
    }
    facts
}

fn write_local_facts(f: &serde_json::Value, out: &mut Out) -> anyhow::Result<()> {
    let s = |k: &str| f[k].as_str().map(str::to_owned);
    writeln!(out, "familiar {}", s("client_version").unwrap_or_default())?;
    match s("config_error") {
        Some(e) => writeln!(out, "config: {e}")?,
        None => {
            writeln!(
                out,
                "config: {}",
                s("config").unwrap_or_else(|| "none (built-in defaults)".to_owned())
            )?;
            writeln!(
                out,
                "provider: {}, model {}, default soul {}",
                s("provider").unwrap_or_default(),
                s("model").unwrap_or_else(|| "?".to_owned()),
                s("default_soul").unwrap_or_default()
            )?;
            writeln!(out, "data dir: {}", s("data_dir").unwrap_or_default())?;
        }
    }
    let landlock: Option<SandboxReport> = serde_json::from_value(f["landlock"].clone()).ok();
    writeln!(
        out,
        "landlock (this kernel): {}",
        describe_sandbox(landlock.as_ref())
    )?;
    Ok(())
}

/// `familiar status`: the local facts, then the daemon's (or that it is not running;
/// exit 3 then, as `systemctl status` does for an inactive unit).
pub fn status(config: Option<&std::path::Path>, json: bool, out: &mut Out) -> anyhow::Result<Exit> {
    let local = local_facts(config);
    let got = with_proxy(async |conn, p| {
        // Asked before any call to the daemon: a call to a name nobody owns would start
        // the daemon by D-Bus activation, and `status` only looks.
        let dbus = zbus::fdo::DBusProxy::new(conn).await?;
        let name = zbus::names::BusName::try_from(familiar_protocol::NAME)?;
        if !dbus.name_has_owner(name).await.map_err(zbus::Error::from)? {
            return Ok(None);
        }
        let version = p.version().await?;
        let active = p.active_tasks().await?;
        let metrics = p.metrics().await?;
        // A daemon older than the `Sandbox` property still answers the rest.
        let sandbox = p.sandbox().await.ok();
        let configuration = p.configuration().await.ok();
        let pid = dbus
            .get_connection_unix_process_id(familiar_protocol::NAME.try_into()?)
            .await
            .ok();
        Ok(Some((version, active, metrics, pid, sandbox, configuration)))
    })?
    .and_then(|running| {
        running.ok_or_else(|| Failure {
            exit: Exit::Unreachable,
            message: format!(
                "the familiar daemon is not running (nothing owns {}, and `status` does not start it): it starts on first use once `familiar setup` installed its activation file, or now with `systemctl --user start familiar`",
                familiar_protocol::NAME
            ),
        })
    });
    let (version, active, metrics, pid, sandbox, configuration) = match got {
        Ok(v) => v,
        Err(f) => {
            if json {
                let mut all = local;
                all["daemon"] = serde_json::json!({"running": false, "error": f.message});
                out.json_line(&all)?;
            } else {
                write_local_facts(&local, out)?;
                writeln!(out, "daemon: not running")?;
            }
            out.flush()?;
            return f.report();
        }
    };
    let uptime = pid.and_then(process_uptime_secs);
    let metrics: std::collections::BTreeMap<_, _> = metrics.into_iter().collect();
    // The daemon's own config (`configuration`): `familiar status` may run with another.
    if json {
        let mut all = local;
        for (k, v) in [
            ("daemon_config", serde_json::json!(configuration)),
            ("version", serde_json::json!(version)),
            ("pid", serde_json::json!(pid)),
            ("uptime_secs", serde_json::json!(uptime)),
            ("active_tasks", serde_json::json!(active)),
            ("metrics", serde_json::json!(metrics)),
            ("sandbox", serde_json::json!(sandbox)),
        ] {
            all[k] = v;
        }
        all["daemon"] = serde_json::json!({"running": true});
        out.json_line(&all)?;
        return Ok(Exit::Completed);
    }
    write_local_facts(&local, out)?;
    writeln!(out, "familiar daemon {version}")?;
    if let Some(pid) = pid {
        match uptime {
            Some(s) => writeln!(
                out,
                "pid {pid}, up {}",
                humantime::format_duration(std::time::Duration::from_secs(s))
            )?,
            None => writeln!(out, "pid {pid}")?,
        }
    }
    if let Some(c) = &configuration {
        write_daemon_config(c, &local, out)?;
    }
    writeln!(out, "sandbox: {}", describe_sandbox(sandbox.as_ref()))?;
    writeln!(out, "active tasks: {active}")?;
    for (k, v) in &metrics {
        writeln!(out, "  {k:<20} {v}")?;
    }
    Ok(Exit::Completed)
}

/// The config the daemon runs with (`c`, its `Configuration` property), and the
/// warnings that go with it: a config.toml it could not reload, a data dir that is not
/// this shell's (`local`).
fn write_daemon_config(
    c: &Configuration,
    local: &serde_json::Value,
    out: &mut Out,
) -> anyhow::Result<()> {
    let s = |v: &Option<String>| v.as_deref().unwrap_or("?").to_owned();
    let config = c.config.as_deref().unwrap_or("none (built-in defaults)");
    writeln!(out, "daemon config: {config}")?;
    writeln!(
        out,
        "daemon provider: {}, model {}, default soul {}, policy {}",
        s(&c.provider),
        s(&c.model),
        s(&c.default_soul),
        s(&c.policy)
    )?;
    writeln!(out, "daemon data dir: {}", s(&c.data_dir))?;
    if let Some(error) = &c.reload_error {
        writeln!(out, "warning: {error}")?;
    }
    for line in warm_lines(c) {
        writeln!(out, "{line}")?;
    }
    let daemon = serde_json::json!({ "data_dir": c.data_dir });
    if let Some(warning) = data_dir_split(local, &daemon) {
        writeln!(out, "warning: {warning}")?;
    }
    Ok(())
}

/// One line per warmed soul's prefix (the `warm` of the daemon's `Configuration`):
/// `prefix of safe_assistant: warm (2450 tokens, 1840 cached, 12.3 s)`.
fn warm_lines(c: &Configuration) -> Vec<String> {
    c.warm
        .iter()
        .map(|(soul, w)| {
            let state = w.state.as_str();
            let detail = match (w.state, &w.reason) {
                (WarmState::Warm, _) => format!(
                    " ({} tokens, {} cached, {:.1} s)",
                    w.prompt_tokens,
                    w.cached_tokens,
                    w.ms as f64 / 1000.0
                ),
                (_, Some(reason)) => format!(": {reason}"),
                (_, None) => String::new(),
            };
            format!("prefix of {soul}: {state}{detail}")
        })
        .collect()
}

/// What to say when the daemon keeps its sessions in another data dir than this
/// command's: then `sessions`, `memory` and `run -c` here do not see the daemon's.
/// `None` when they agree, or when either side does not say (an older daemon).
pub(super) fn data_dir_split(
    local: &serde_json::Value,
    daemon: &serde_json::Value,
) -> Option<String> {
    let (here, there) = (local["data_dir"].as_str()?, daemon["data_dir"].as_str()?);
    (here != there).then(|| {
        format!(
            "the daemon keeps its sessions in {there}, this shell in {here}: `familiar sessions`, `memory` and `run -c` here do not see the daemon's. Give both the same XDG_STATE_HOME (or set `data_dir` in config.toml), then `systemctl --user restart familiar`"
        )
    })
}

/// `Landlock ABI 6, full`, `Landlock ABI 3, partial (missing: …)`, `none (…)`.
fn describe_sandbox(e: Option<&SandboxReport>) -> String {
    match e {
        Some(e) => e.describe(),
        None => "unknown (the daemon does not report it)".to_owned(),
    }
}

/// Seconds since `pid` started, from /proc (start time is in clock ticks since boot;
/// USER_HZ is 100 on every Linux ABI).
fn process_uptime_secs(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which may contain spaces, closed by the last ')'.
    let rest = stat.rsplit_once(')')?.1;
    let start_ticks: u64 = rest.split_whitespace().nth(19)?.parse().ok()?;
    let boot = std::fs::read_to_string("/proc/uptime").ok()?;
    let since_boot: f64 = boot.split_whitespace().next()?.parse().ok()?;
    Some((since_boot as u64).saturating_sub(start_ticks / 100))
}

#[cfg(test)]
mod tests {
    use familiar_sandbox::seccomp::UnixSockets;
    use familiar_sandbox::status::Enforcement;

    use super::*;
    use crate::sandbox::report;

    #[test]
    fn warm_prefixes_are_one_line_each() {
        let c: Configuration = serde_json::from_value(serde_json::json!({"warm": {
            "desktop": {"state": "skipped", "reason": "on battery", "prompt_tokens": 0, "cached_tokens": 0, "ms": 0, "at": ""},
            "safe_assistant": {"state": "warm", "prompt_tokens": 2450, "cached_tokens": 0, "ms": 12300, "at": ""},
        }, "config": null, "provider": null, "model": null, "default_soul": null, "policy": null,
        "data_dir": null, "reload_error": null}))
        .unwrap();
        assert_eq!(
            warm_lines(&c),
            [
                "prefix of desktop: skipped: on battery",
                "prefix of safe_assistant: warm (2450 tokens, 0 cached, 12.3 s)"
            ]
        );
    }
    #[test]
    fn the_sandbox_line_names_the_abi_and_what_is_missing() {
        let line = |e: Enforcement| describe_sandbox(Some(&report(&e)));
        assert_eq!(
            line(Enforcement::for_abi(Some(6))),
            "Landlock ABI 6, full, unix sockets blocked"
        );
        assert_eq!(
            line(Enforcement::for_abi(Some(5))),
            "Landlock ABI 5, partial, unix sockets blocked (missing: signal and abstract unix socket scoping (ABI 6))"
        );
        assert_eq!(
            line(Enforcement::for_abi(None)),
            "none, unix sockets blocked (missing: landlock)"
        );
        let open = Enforcement::for_abi(Some(6)).with_unix_sockets(UnixSockets::Open);
        assert_eq!(
            line(open),
            "Landlock ABI 6, partial, unix sockets open (missing: unix socket block (seccomp))"
        );
        assert!(describe_sandbox(None).starts_with("unknown"));
    }
}
