use std::path::Path;

use super::*;
use crate::catalog::Tier;
use crate::policy::Mode;
use crate::policy::{Policy, TierModes};
use crate::sandbox::Resources;

fn policy(write: Mode, execute: Mode) -> Policy {
    let mut p = Policy::from_toml("default.toml", "", Path::new("/home/user")).unwrap();
    p.tiers = TierModes {
        read: Mode::Allow,
        write,
        execute,
        system_critical: Mode::Ask,
    };
    p
}

fn parse_str(src: &str, pol: Option<&Policy>) -> Result<Soul, FileError> {
    parse(
        "mine.toml",
        "mine",
        src,
        PromptSource::BuiltIn,
        Path::new("/home/user"),
        pol,
        SoulOrigin::BuiltIn,
    )
}

#[test]
fn every_builtin_soul_parses() {
    for (id, src) in BUILTIN_SOULS {
        let soul = parse(
            &format!("built-in:souls/{id}.toml"),
            id,
            src,
            PromptSource::BuiltIn,
            Path::new("/home/user"),
            Some(&policy(Mode::Ask, Mode::Ask)),
            SoulOrigin::BuiltIn,
        )
        .unwrap_or_else(|e| panic!("{id}: {e}"));
        insta::assert_json_snapshot!(format!("soul_{id}"), soul);
    }
}

#[test]
fn builtin_budgets_match_the_contract() {
    let iters = |id: &str| {
        let (_, src) = BUILTIN_SOULS.iter().find(|(i, _)| *i == id).unwrap();
        parse(
            "x",
            id,
            src,
            PromptSource::BuiltIn,
            Path::new("/h"),
            None,
            SoulOrigin::BuiltIn,
        )
        .unwrap()
        .max_iterations
    };
    assert_eq!(iters("safe_assistant"), 10);
    assert_eq!(iters("system_admin"), 20);
    assert_eq!(iters("automation_agent"), 50);
    assert_eq!(iters("research_agent"), 15);
}

#[test]
fn safe_assistant_is_read_only() {
    let (id, src) = BUILTIN_SOULS[0];
    let soul = parse(
        "x",
        id,
        src,
        PromptSource::BuiltIn,
        Path::new("/h"),
        None,
        SoulOrigin::BuiltIn,
    )
    .unwrap();
    for tool in &soul.grant.tools {
        assert_eq!(
            crate::catalog::info(tool).unwrap().tier,
            Tier::Read,
            "{tool}"
        );
    }
    assert_eq!(soul.grant.permissions.write, Mode::Deny);
    assert_eq!(soul.grant.permissions.execute, Mode::Deny);
    assert!(soul.sandbox.write.is_empty());
}

#[test]
fn minimal_soul_gets_the_defaults() {
    let soul = parse_str("prompt = \"be nice\"\n", None).unwrap();
    assert_eq!(soul.id.as_str(), "mine");
    assert_eq!(soul.max_iterations, DEFAULT_MAX_ITERATIONS);
    assert_eq!(soul.max_tokens, DEFAULT_MAX_TOKENS);
    assert_eq!(soul.max_wall_clock, DEFAULT_MAX_WALL_CLOCK);
    assert_eq!(soul.grant.tools, DEFAULT_TOOLS);
    assert_eq!(soul.sandbox.read, vec![PathBuf::from("/home/user")]);
    assert!(!soul.sandbox.network);
}

#[test]
fn soul_modes_are_clamped_to_the_policy() {
    let soul = parse_str("prompt = \"p\"\n[permissions]\nwrite = \"deny\"\n", None).unwrap();
    let eff = soul.effective_modes(&policy(Mode::Ask, Mode::Ask));
    assert_eq!(eff.write, Mode::Deny);
    assert_eq!(
        eff.execute,
        Mode::Ask,
        "an omitted tier takes the policy's mode"
    );
}

#[test]
fn malformed_souls_name_file_line_key_and_allowed_values() {
    let pol = policy(Mode::Ask, Mode::Ask);
    let cases: &[(&str, &str)] = &[
        (
            "prompt = \"p\"\nmax_iteratons = 5\n",
            "mine.toml:2: key `max_iteratons`: unknown field `max_iteratons`, expected one of",
        ),
        (
            "prompt = \"p\"\nmax_iterations = \"ten\"\n",
            "mine.toml:2: key `max_iterations`: invalid type: string \"ten\", expected u32",
        ),
        (
            "prompt = \"p\"\nmax_iterations = 0\n",
            "mine.toml:2: key `max_iterations`: 0 is outside 1..=1000",
        ),
        (
            "prompt = \"p\"\n[precheck]\ndisk_percent = 0\n",
            "mine.toml:3: key `precheck.disk_percent`: 0 is outside 1..=100",
        ),
        (
            "prompt = \"p\"\n[precheck]\nfailed = true\n",
            "mine.toml:3: key `precheck.failed`: unknown field `failed`",
        ),
        (
            "prompt = \"p\"\ntools = [\"mcp:Notes\"]\n",
            "mine.toml:2: key `tools`: `mcp:Notes` is not an MCP entry: write `mcp:NAME`",
        ),
        (
            "prompt = \"p\"\ntools = [\"read_file\",\n  \"mcp:notes/a/b\"]\n",
            "mine.toml:3: key `tools`: `mcp:notes/a/b` is not an MCP entry",
        ),
        (
            "prompt = \"p\"\ntools = [\"read_file\", \"rm_rf\"]\n",
            "mine.toml:2: key `tools`: unknown tool `rm_rf` (known: read_file, list_dir,",
        ),
        (
            "prompt = \"p\"\n[permissions]\nwrite = \"maybe\"\n",
            "mine.toml:3: key `permissions.write`: unknown variant `maybe`, expected one of `allow`, `ask`, `deny`",
        ),
        (
            "prompt = \"p\"\n[permissions]\nexecute = \"allow\"\n",
            "mine.toml:3: key `permissions.execute`: `allow` is looser than policy `default`, which sets execute = `ask`: a soul can only tighten the policy (allowed here: ask, deny)",
        ),
        (
            "prompt = \"p\"\nmax_wall_clock = \"a while\"\n",
            "mine.toml:2: key `max_wall_clock`: invalid duration `a while`",
        ),
        (
            "prompt = \"p\"\n[sandbox]\nwrite = [\"relative/dir\"]\n",
            "mine.toml:3: key `sandbox.write`: `relative/dir` must be absolute or start with ~/",
        ),
        (
            "prompt = \"p\"\n[sandbox]\nnetwork = \"yes\"\n",
            "mine.toml:3: key `sandbox.network`: invalid type: string \"yes\", expected a boolean",
        ),
        (
            "prompt = \"p\"\n[rate_limits]\ntool_calls = \"lots\"\n",
            "mine.toml:3: key `rate_limits.tool_calls`: invalid rate `lots`: expected COUNT/UNIT",
        ),
        (
            "id = \"other\"\nprompt = \"p\"\n",
            "mine.toml:1: key `id`: id `other` does not match the file name `mine.toml`",
        ),
        (
            "description = \"d\"\n",
            "mine.toml: missing `prompt` or `prompt_file`",
        ),
        (
            "prompt_file = \"prompts/nope.md\"\n",
            "mine.toml:1: key `prompt_file`: no built-in prompt `prompts/nope.md`",
        ),
        ("prompt = \"p\"\n[permissions\n", "mine.toml:2:"),
    ];
    for (src, want) in cases {
        let err = parse_str(src, Some(&pol)).unwrap_err().to_string();
        assert!(err.starts_with(want), "{src:?}\n got: {err}\nwant: {want}");
    }
}

#[test]
fn user_soul_files_replace_builtins_and_bad_ones_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let souls = dir.path().join("souls");
    std::fs::create_dir_all(souls.join("prompts")).unwrap();
    std::fs::write(souls.join("prompts/mine.md"), "You are mine.").unwrap();
    std::fs::write(
        souls.join("safe_assistant.toml"),
        "prompt_file = \"prompts/mine.md\"\nmax_iterations = 3\n",
    )
    .unwrap();
    std::fs::write(souls.join("broken.toml"), "prompt = 5\n").unwrap();
    let paths = Paths {
        config_dir: dir.path().to_owned(),
        data_dir: dir.path().join("data"),
        home: "/home/user".into(),
    };
    let set = SoulSet::load(&paths, &policy(Mode::Ask, Mode::Ask)).unwrap();
    let soul = set.get("safe_assistant").unwrap();
    assert_eq!(soul.max_iterations, 3);
    assert_eq!(soul.prompt, "You are mine.");
    assert_eq!(
        soul.origin,
        SoulOrigin::File(souls.join("safe_assistant.toml"))
    );
    assert_eq!(set.souls.len(), BUILTIN_SOULS.len());
    assert_eq!(set.errors.len(), 1);
    assert!(
        set.errors[0]
            .to_string()
            .contains("broken.toml:1: key `prompt`")
    );
    let err = set.get("broken").unwrap_err().to_string();
    assert!(
        err.contains("unknown soul `broken`") && err.contains("broken.toml:1"),
        "{err}"
    );
}

#[test]
fn memory_and_delegates_are_off_by_default() {
    let soul = parse_str("prompt = \"p\"\n", None).unwrap();
    assert!(!soul.memory);
    assert!(soul.delegates.is_empty());
    let soul = parse_str("prompt = \"p\"\nmemory = true\n", None).unwrap();
    assert!(soul.memory);
}

#[test]
fn delegates_without_the_delegate_tool_name_the_key() {
    let err = parse_str(
        "prompt = \"p\"\ntools = [\"read_file\"]\ndelegates = [\"research_agent\"]\n",
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.starts_with("mine.toml:3: key `delegates`:")
            && err.contains("does not list `delegate`"),
        "{err}"
    );
    let err = parse_str("prompt = \"p\"\ndelegates = [\"../x\"]\n", None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("mine.toml:2"), "{err}");
}

#[test]
fn a_delegate_runs_under_the_stricter_of_both_souls() {
    let parent = parse_str(
        "prompt = \"p\"\nmax_iterations = 8\ntools = [\"read_file\", \"list_dir\", \"shell\"]\n\
         [permissions]\nexecute = \"ask\"\n\
         [sandbox]\nread = [\"~/docs\", \"/etc\"]\nwrite = [\"~/out\"]\nnetwork = false\n",
        None,
    )
    .unwrap();
    let child = parse_str(
        "prompt = \"c\"\nmax_iterations = 20\ntools = [\"shell\", \"write_file\", \"read_file\"]\n\
         [permissions]\nwrite = \"deny\"\n\
         [sandbox]\nread = [\"~\", \"/usr/share/doc\"]\nwrite = [\"~/out/sub\", \"~/elsewhere\"]\n\
         network = true\nrequire = true\n",
        None,
    )
    .unwrap();
    let r = child.restricted_to(&parent);
    assert_eq!(r.id, child.id);
    assert_eq!(r.prompt, "c");
    assert_eq!(r.grant.tools, ["shell", "read_file"]);
    assert_eq!(
        r.grant.permissions,
        TierModes {
            read: Mode::Allow,
            write: Mode::Deny,
            execute: Mode::Ask,
            system_critical: Mode::Allow,
        }
    );
    let h = |p: &str| PathBuf::from(format!("/home/user/{p}"));
    assert_eq!(r.sandbox.read, [h("docs")]);
    assert_eq!(r.sandbox.write, [h("out/sub")]);
    assert!(!r.sandbox.network);
    assert!(r.sandbox.require);
    assert_eq!(r.max_iterations, 8);
}

#[test]
fn tree_intersection_is_component_wise() {
    let p = |s: &str| PathBuf::from(s);
    assert_eq!(
        intersect_trees(&[p("/home/a")], &[p("/home/ab")]),
        Vec::<PathBuf>::new()
    );
    assert_eq!(
        intersect_trees(&[p("/")], &[p("/etc"), p("/var/log")]),
        [p("/etc"), p("/var/log")]
    );
}

#[test]
fn mcp_entries_are_kept_and_allow_their_servers_tools() {
    let soul = parse_str(
        "prompt = \"p\"\ntools = [\"read_file\", \"mcp:notes\", \"mcp:git/log\", \"mcp:notes\"]\n",
        None,
    )
    .unwrap();
    assert_eq!(
        soul.grant.tools,
        ["read_file", "mcp:notes", "mcp:git/log"],
        "listed once, in order"
    );
    assert!(soul.grant.allows_tool("notes__search"));
    assert!(soul.grant.allows_tool("git__log"));
    assert!(!soul.grant.allows_tool("git__push"));
}

#[test]
fn resources_parse_as_systemd_spells_them_and_a_delegate_gets_the_smaller() {
    let parent = parse_str(
        "prompt = \"p\"\n[resources]\nmemory_max = \"1G\"\ncpu_quota = \"150%\"\n",
        None,
    )
    .unwrap();
    assert_eq!(
        parent.resources,
        Resources {
            memory_max: Some(1 << 30),
            cpu_quota: Some(150),
            tasks_max: None,
        }
    );
    let child = parse_str(
        "prompt = \"c\"\n[resources]\nmemory_max = 268435456\ntasks_max = 32\n",
        None,
    )
    .unwrap();
    assert_eq!(
        child.restricted_to(&parent).resources,
        Resources {
            memory_max: Some(256 << 20),
            cpu_quota: Some(150),
            tasks_max: Some(32),
        }
    );
    // None set: nothing in `souls show`, nothing for the task to set up.
    let plain = parse_str("prompt = \"p\"\n", None).unwrap();
    assert!(plain.resources.is_empty());
}
