//! config.toml changed while the real daemon runs: picked up at the next
//! `Submit` like a soul or policy file (or at once with `familiar reload`), and a broken
//! one keeps the previous version and says so to the next `familiar ask`; a soul that
//! names what config.toml lacks is refused at its file and line.

use super::cli::familiar;
use super::data_dir::{notify_socket, ready};
use super::systemd::spawn_daemon;
use super::*;
use crate::common::TestHome;
use crate::common::llm_server::Reply;
use crate::common::llm_server::{LlmServer, oa_done, oa_finish, oa_text, sse};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn config(server: &LlmServer, model: &str) -> String {
    format!(
        "[providers.local]\nbase_url = \"{}/v1\"\nmodel = \"{model}\"\nmax_retries = 0\n",
        server.base
    )
}

/// Regression: a daemon kept the config.toml it started with until it was
/// restarted, silently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_reloads_config_toml_and_keeps_the_previous_one_when_it_breaks() {
    let answer = || Reply::sse(sse(vec![oa_text("ok"), oa_finish("stop"), oa_done()]));
    let server = LlmServer::start(vec![answer(), answer(), answer()]).await;
    let home = TestHome::new();
    home.write_config("config.toml", &config(&server, "first"));
    let bus = TestBus::start();
    let (_sock_dir, sock_path, sock) = notify_socket();
    let child = spawn_daemon(&bus, &home, &sock_path, &[]);
    let _sock = ready(sock).await;
    let ask = async || {
        let out = familiar(&home, &bus, &["ask", "hello"], &[]).await;
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let model = server.requests().last().unwrap().body["model"].clone();
        (model, text(&out.stderr))
    };
    let (model, said) = ask().await;
    assert_eq!(model, "first");
    assert!(!said.contains("warning"), "{said}");

    // Changed: the next task uses it, no restart or signal needed.
    home.write_config("config.toml", &config(&server, "second"));
    assert_eq!(ask().await.0, "second");

    // Broken: the previous config stays, and `ask` says so with the file's line.
    let file = home.write_config("config.toml", "[providers.local\nmodel = \"x\"\n");
    let (model, said) = ask().await;
    assert_eq!(model, "second");
    assert!(
        said.contains(&format!(
            "familiar: warning: config.toml does not load, the daemon keeps its previous version: {}:1",
            file.display()
        )),
        "{said}"
    );
    let out = familiar(&home, &bus, &["status"], &[]).await;
    assert!(
        text(&out.stdout).contains("warning: config.toml does not load"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(stop_daemon(child).await, Some(0));
}

/// Regression: the only ways to reload were SIGHUP and `systemctl --user reload`.
/// `familiar reload` (the D-Bus `Reload()`) does it now and says what it kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn familiar_reload_reloads_now_and_names_what_it_kept() {
    let server = LlmServer::start(vec![]).await;
    let home = TestHome::new();
    home.write_config("config.toml", &config(&server, "first"));
    let bus = TestBus::start();
    let (_sock_dir, sock_path, sock) = notify_socket();
    let child = spawn_daemon(&bus, &home, &sock_path, &[]);
    let _sock = ready(sock).await;
    let out = familiar(&home, &bus, &["reload"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("reloaded config.toml"));
    let file = home.write_config("config.toml", "[providers.local\n");
    let out = familiar(&home, &bus, &["reload"], &[]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains(&format!("{}:1", file.display())),
        "{}",
        text(&out.stderr)
    );
    // Regression (issue 42 §5): a broken soul file said "reloaded", exit 0; only the
    // daemon's log said the soul was kept.
    home.write_config("config.toml", &config(&server, "first"));
    let soul = home.write_config("souls/mine.toml", "prompt = \"p\"\n");
    let out = familiar(&home, &bus, &["reload"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    home.write_config(
        "souls/mine.toml",
        "prompt = \"p\"\nmax_iterations = \"many\"\n",
    );
    let out = familiar(&home, &bus, &["reload"], &[]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let said = text(&out.stderr);
    assert!(
        said.contains("previous version stays in force")
            && said.contains(&format!("{}:2", soul.display())),
        "{said}"
    );
    assert_eq!(stop_daemon(child).await, Some(0));
}

/// Regression: `ask` under a soul naming a provider config.toml lacks failed the task
/// (exit 1) with no file, line or key; it is `souls validate`'s error, exit 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_under_a_soul_naming_an_unknown_provider_is_a_file_line_error() {
    let server = LlmServer::start(vec![]).await;
    let home = TestHome::new();
    home.write_config("config.toml", &config(&server, "first"));
    let soul = home.write_config("souls/mine.toml", "prompt = \"p\"\nprovider = \"nosuch\"\n");
    let bus = TestBus::start();
    let (_sock_dir, sock_path, sock) = notify_socket();
    let child = spawn_daemon(&bus, &home, &sock_path, &[]);
    let _sock = ready(sock).await;
    let out = familiar(&home, &bus, &["ask", "--soul", "mine", "hi"], &[]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(&format!(
            "{}:2: key `provider`: unknown provider `nosuch`",
            soul.display()
        )),
        "{}",
        text(&out.stderr)
    );
    assert!(server.requests().is_empty());
    assert_eq!(stop_daemon(child).await, Some(0));
}
