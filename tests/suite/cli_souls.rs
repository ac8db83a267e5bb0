//! A newcomer's souls and config mistakes, through the real binary: a shipped soul
//! copied with its prompt, which file each soul comes from, and every mistake a soul
//! or config.toml can hold said at its file, line and key, exit 2 (before any model
//! call: the provider here listens nowhere).

use crate::common::TestHome;

fn run(home: &TestHome, args: &[&str]) -> (Option<i32>, String, String) {
    let out = home.familiar().args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

// Regression: the README's "copy a soul from souls/" left its prompt_file behind, and
// familiar quietly ran the built-in soul.
#[test]
fn souls_copy_writes_the_soul_with_its_prompt_and_it_is_the_one_used() {
    let home = TestHome::new();
    let (code, out, err) = run(&home, &["souls", "copy", "system_admin"]);
    assert_eq!(code, Some(0), "{err}");
    let souls = home.config_dir().join("souls");
    let soul = souls.join("system_admin.toml");
    assert!(out.contains(&soul.display().to_string()), "{out}");
    assert!(souls.join("prompts/system_admin.md").is_file());
    let (code, _, err) = run(&home, &["souls", "validate", soul.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    let (_, list, _) = run(&home, &["souls"]);
    let line = list
        .lines()
        .find(|l| l.starts_with("system_admin"))
        .unwrap();
    assert!(line.contains(&soul.display().to_string()), "{list}");
    let line = list.lines().find(|l| l.starts_with("desktop")).unwrap();
    assert!(line.contains("built-in"), "{list}");
    // A second copy overwrites nothing.
    let (code, _, err) = run(&home, &["souls", "copy", "system_admin"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("already exists"), "{err}");
    let (code, _, err) = run(&home, &["souls", "copy", "nosuch"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("no shipped soul `nosuch`"), "{err}");
}

#[test]
fn a_copied_soul_without_its_prompt_is_an_error_naming_the_fix_not_the_builtin() {
    let home = TestHome::new();
    home.write_unreachable_provider();
    let path = home.write_config(
        "souls/safe_assistant.toml",
        "description = \"mine\"\nprompt_file = \"prompts/safe_assistant.md\"\n",
    );
    let (code, _, err) = run(&home, &["run", "--soul", "safe_assistant", "hi"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!("{}:2: key `prompt_file`", path.display())),
        "{err}"
    );
    assert!(err.contains("familiar souls copy"), "{err}");
}

#[test]
fn a_soul_naming_an_unknown_provider_or_mcp_server_is_a_file_line_error() {
    let home = TestHome::new();
    home.write_unreachable_provider();
    let path = home.write_config(
        "souls/mine.toml",
        "prompt = \"p\"\nprovider = \"nosuch\"\ntools = [\"read_file\"]\n",
    );
    let (code, _, err) = run(&home, &["run", "--soul", "mine", "hi"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "{}:2: key `provider`: unknown provider `nosuch`",
            path.display()
        )),
        "{err}"
    );
    let path = home.write_config(
        "souls/mcp.toml",
        "prompt = \"p\"\ntools = [\"read_file\", \"mcp:nosuch\"]\n",
    );
    let (code, _, err) = run(&home, &["run", "--soul", "mcp", "hi"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!("{}:2: key `tools`: `mcp:nosuch`", path.display())),
        "{err}"
    );
}

#[test]
fn an_unknown_default_soul_is_an_error_at_its_config_line() {
    let home = TestHome::new();
    let port = home.write_unreachable_provider();
    let path = home.write_config(
        "config.toml",
        &format!(
            "default_soul = \"nosuch\"\n[providers.local]\nbase_url = \"http://127.0.0.1:{port}/v1\"\nmax_retries = 0\n"
        ),
    );
    let (code, _, err) = run(&home, &["run", "hi"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "{}:1: key `default_soul`: unknown soul `nosuch`",
            path.display()
        )),
        "{err}"
    );
}

// Regression: with no Ollama running, the first line was a log-format `WARN Ollama's
// /api/show did not give a context length`, which read as if a server had answered.
#[test]
fn no_ollama_running_is_said_once_as_a_person_would() {
    let home = TestHome::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    home.write_config(
        "config.toml",
        &format!(
            "[providers.local]\nkind = \"ollama\"\nbase_url = \"http://127.0.0.1:{port}\"\nmax_retries = 0\n"
        ),
    );
    let (code, _, err) = run(&home, &["run", "hi"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(!err.contains("WARN") && !err.contains("/api/show"), "{err}");
    assert!(
        err.contains(&format!("nothing answers at http://127.0.0.1:{port}")),
        "{err}"
    );
}
