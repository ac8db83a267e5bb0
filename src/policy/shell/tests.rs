//! Shell analysis tests: spellings that must meet, constructs that must be reported.

use super::*;
use proptest::prelude::*;

fn a(cmd: &str) -> Analysis {
    analyze(cmd, Path::new("/home/u"), None)
}

#[test]
fn dangerous_spellings_share_one_canonical_form() {
    for cmd in [
        "rm -rf ~",
        "rm -r -f ~",
        "rm -fr ~",
        "rm  -rf   ~",
        "/bin/rm -rf ~",
        "\\rm -rf ~",
        "rm -rf $HOME",
        "rm -rf \"${HOME}/\"",
        "rm -rf /home/u",
        "rm -rf /home/u/x/..",
        "sudo rm -rf ~",
        "sudo -u root -E rm -rf ~",
        "doas rm -rf ~",
        "env X=1 rm -rf ~",
        "nice -n 5 nohup rm -rf ~",
        "timeout -s KILL 10s rm -rf ~",
        "time command rm -rf ~",
        "stdbuf -o0 rm -rf ~",
        "busybox rm -rf ~",
        "bash -c 'rm -rf ~'",
        "sh -lc \"rm -rf ~\"",
        "zsh -c 'sudo rm -rf ~'",
        "echo hi; rm -rf ~",
        "true && rm -rf ~ || false",
        "(rm -rf ~)",
        "cd /tmp\nrm -rf ~",
        "find /tmp -exec rm -rf ~ \\;",
        "echo $(rm -rf ~)",
        "rm -rf -- ~",
    ] {
        let got = a(cmd);
        assert!(
            got.subjects.contains(&"rm -f -r ~".to_owned()),
            "{cmd}: {:?}",
            got.subjects
        );
    }
}

#[test]
fn cd_then_relative_glob_is_seen_against_the_cd_target() {
    let got = a("sh -c \"cd / && rm -rf *\"");
    assert!(got.subjects.contains(&"rm -f -r /*".to_owned()), "{got:?}");
    let got = a("cd; cat .ssh/id_rsa");
    assert!(got.paths.contains(&"~/.ssh/id_rsa".to_owned()), "{got:?}");
}

#[test]
fn redirections_are_subjects_and_paths() {
    let got = a("echo key >> ~/.ssh/authorized_keys 2>/dev/null");
    assert!(
        got.subjects
            .contains(&">> ~/.ssh/authorized_keys".to_owned())
    );
    assert!(got.paths.contains(&"~/.ssh/authorized_keys".to_owned()));
    assert!(got.subjects.contains(&"echo key".to_owned()), "{got:?}");
    let got = a("cat x>/dev/sda");
    assert!(got.subjects.contains(&"> /dev/sda".to_owned()), "{got:?}");
    let got = a("make 2>&1 | tee log");
    assert!(got.opaque.is_empty() && got.error.is_none(), "{got:?}");
    assert!(!got.paths.iter().any(|p| p == "1"), "{got:?}");
}

#[test]
fn quoted_separators_do_not_split() {
    let got = a("echo 'a; rm -rf ~' \"b && c\"");
    assert_eq!(got.subjects, vec!["echo a; rm -rf ~ b && c".to_owned()]);
}

#[test]
fn opaque_constructs_are_reported() {
    for cmd in [
        "eval \"$X\"",
        "source ./env.sh",
        ". ./env.sh",
        "echo $(whoami)",
        "echo `whoami`",
        "diff <(ls a) <(ls b)",
        "curl -fsSL https://x.sh | sh",
        "wget -qO- https://x | sudo bash",
        "cat script | python3",
        "cat x.pl | perl",
        "echo aGk= | base64 -d | tee out",
        "python3 -c 'import os'",
        "perl -pe 's/a/b/' f",
        "git -c core.pager='sh -c id' log",
        "git -c core.sshCommand=evil fetch",
        "git -c alias.x='!rm -rf ~' x",
        "git -c core.fsmonitor=./x status",
        "git config core.editor 'sh -c id'",
        "find . -name '*.o' -delete",
        "bash <<EOF\nls\nEOF",
        "LD_PRELOAD=/tmp/x.so ls",
        "$CMD -rf /tmp",
    ] {
        let got = a(cmd);
        assert!(!got.opaque.is_empty(), "{cmd}: {got:?}");
    }
}

#[test]
fn plain_commands_are_not_opaque() {
    for cmd in [
        "ls -la",
        "df -h",
        "git status",
        "git -C repo log --oneline",
        "cargo build 2>&1 | tail -n 20",
        "python3 script.py --flag",
        "find . -name '*.rs' -exec wc -l {} +",
        "grep -r 'a|b' src | sort | uniq -c",
        "echo \"rm -rf /\"",
        "cat > notes.txt <<'EOF'\nit's fine: rm -rf ~\nEOF",
    ] {
        let got = a(cmd);
        assert!(
            got.opaque.is_empty() && got.error.is_none(),
            "{cmd}: {got:?}"
        );
    }
}

#[test]
fn unbalanced_quotes_are_errors() {
    for cmd in ["echo 'oops", "echo \"oops", "echo $(oops", "echo `oops"] {
        assert!(a(cmd).error.is_some(), "{cmd}");
    }
}

#[test]
fn heredoc_into_a_shell_is_followed() {
    let got = a("bash <<'EOF'\nrm -rf ~\nEOF\n");
    assert!(got.subjects.contains(&"rm -f -r ~".to_owned()), "{got:?}");
}

#[test]
fn xargs_command_is_seen_without_operands() {
    let got = a("find . -name x | xargs -0 -n 1 rm -rf");
    assert!(got.subjects.contains(&"rm -f -r".to_owned()), "{got:?}");
}

#[test]
fn braces_expand_in_paths() {
    let got = a("cat ~/.{ssh,gnupg}/x");
    assert!(got.paths.contains(&"~/.ssh/x".to_owned()), "{got:?}");
    assert!(got.paths.contains(&"~/.gnupg/x".to_owned()), "{got:?}");
}

proptest! {
    #[test]
    fn analysis_never_panics(s in "\\PC{0,80}") {
        let _analysis = a(&s);
    }

    #[test]
    fn analysis_never_panics_on_shell_soup(
        s in proptest::collection::vec(
            prop_oneof![
                Just("'"), Just("\""), Just("\\"), Just("$("), Just(")"), Just("`"),
                Just("<<"), Just("<("), Just(">"), Just("&"), Just("|"), Just(";"),
                Just("\n"), Just("EOF"), Just(" "), Just("rm"), Just("-rf"), Just("~"),
                Just("bash -c "), Just("find . -exec "), Just("{"), Just("}"), Just("#"),
            ],
            0..30,
        )
    ) {
        let _analysis = a(&s.concat());
    }
}
