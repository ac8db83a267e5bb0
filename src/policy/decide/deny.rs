//! The steps that can deny a call, in the contract's order: the soul's tools, the
//! policy's blocked patterns, its protected paths, the tier's mode. Each records its
//! step and returns the deny, so the first one wins.

use super::{Denied, Judge, Mode, article};
use crate::policy::paths::protected_entry;
use crate::policy::subjects::{abbreviate, first_match, named_paths, seen_as};
use crate::policy::verdict::{DenyRule, Outcome, StepName};

impl Judge<'_> {
    pub(super) fn soul_tools(&mut self) -> Result<(), Denied> {
        let (tool, soul) = (self.call.tool, self.soul);
        if !self.grant.allows_tool(tool) {
            let reason = format!(
                "`{tool}` is not one of soul `{soul}`'s tools (it may use: {})",
                self.grant.tools.join(", ")
            );
            return Err(self.deny(StepName::SoulTools, DenyRule::NotInSoul, reason));
        }
        self.step(
            StepName::SoulTools,
            Outcome::Pass,
            format!("`{tool}` is in soul `{soul}`'s tools"),
        );
        Ok(())
    }

    pub(super) fn blocked_patterns(&mut self) -> Result<(), Denied> {
        let policy = self.policy;
        if let Some((rule, subject)) = first_match(&policy.blocked, self.subjects) {
            let shown = self.shown_or(&subject);
            let reason = format!(
                "`{}`{} is blocked by policy `{}`: {}",
                abbreviate(&shown),
                seen_as(&shown, subject),
                policy.name,
                rule.reason
            );
            return Err(self.deny(StepName::BlockedPatterns, DenyRule::BlockedPattern, reason));
        }
        let detail = if self.subjects.is_empty() {
            "no command to match".to_owned()
        } else {
            format!("{} blocked pattern(s), none matched", policy.blocked.len())
        };
        self.step(StepName::BlockedPatterns, Outcome::Pass, detail);
        Ok(())
    }

    pub(super) fn protected_paths(&mut self) -> Result<(), Denied> {
        let mut paths = named_paths(self.call);
        if let Some(a) = self.analysis {
            paths.extend(a.paths.iter().cloned());
        }
        for p in &paths {
            if let Some(entry) = protected_entry(p, self.ctx, &self.policy.protected_paths) {
                let reason = format!(
                    "`{p}` is protected by policy `{}` (under `{}`): no tool may read or write it",
                    self.policy.name,
                    entry.display()
                );
                return Err(self.deny(StepName::ProtectedPaths, DenyRule::ProtectedPath, reason));
            }
        }
        let detail = match paths.len() {
            0 => "no paths named".to_owned(),
            n => format!("{n} path(s) checked"),
        };
        self.step(StepName::ProtectedPaths, Outcome::Pass, detail);
        Ok(())
    }

    pub(super) fn tier_mode(&mut self) -> Result<Mode, Denied> {
        let (tool, tier) = (self.call.tool, self.call.tier);
        let mode = self.grant.effective_modes(self.policy).get(tier);
        let who = self.who();
        let detail = match mode {
            Mode::Deny => {
                let reason = format!(
                    "`{tool}` is {} {tier} tool and {who} denies {tier} tools",
                    article(tier)
                );
                return Err(self.deny(StepName::TierMode, DenyRule::TierDenied, reason));
            }
            Mode::Ask => format!("{who} asks before {tier} tools"),
            Mode::Allow => format!("{who} allows {tier} tools"),
        };
        self.step(StepName::TierMode, mode.into(), detail);
        // Rate limits come next in the contract's order; the agent loop owns the
        // limiters and applies them to a verdict that is not a deny.
        Ok(mode)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::policy::tests::*;
    use crate::policy::*;

    #[test]
    fn a_blocked_rule_holds_however_it_is_spelled() {
        #[rustfmt::skip]
        let cases: &[(&str, (&str, Value), Want)] = &[
            // The same blocked rule, however it is spelled.
            ("open", sh("rm -rf /"), Deny(BlockedPattern)),
            ("open", sh("rm -r -f /"), Deny(BlockedPattern)),
            ("open", sh("rm -fr ~"), Deny(BlockedPattern)),
            ("open", sh("/bin/rm -rf /"), Deny(BlockedPattern)),
            ("open", sh("\\rm -rf ~"), Deny(BlockedPattern)),
            ("open", sh("rm  -rf   /"), Deny(BlockedPattern)),
            ("open", sh("bash -c 'rm -rf ~'"), Deny(BlockedPattern)),
            ("open", sh("sh -c \"cd / && rm -rf *\""), Deny(BlockedPattern)),
            ("open", sh("sudo rm -rf /"), Deny(BlockedPattern)),
            ("open", sh("sudo -u root rm -rf /"), Deny(BlockedPattern)),
            ("open", sh("env X=1 rm -rf ~"), Deny(BlockedPattern)),
            ("open", sh("find /tmp -type d | xargs rm -rf"), Deny(BlockedPattern)),
            ("open", sh("rm -rf --no-preserve-root /*"), Deny(BlockedPattern)),
            ("open", sh("rm -rf ~/*"), Deny(BlockedPattern)),
            ("open", sh("rm -Rf /home/"), Deny(BlockedPattern)),
            ("open", sh("rm -rf /etc /usr"), Deny(BlockedPattern)),
            ("open", sh("rm -rf $HOME/"), Deny(BlockedPattern)),
            ("open", sh("echo ok && rm -rf /boot"), Deny(BlockedPattern)),
            ("open", sh("mkfs.ext4 /dev/sda1"), Deny(BlockedPattern)),
            ("open", sh("sudo mkfs -t ext4 /dev/nvme0n1p2"), Deny(BlockedPattern)),
            ("open", sh("dd if=/dev/zero of=/dev/sda bs=1M"), Deny(BlockedPattern)),
            ("open", sh("dd if=x.iso of=/dev/mmcblk0"), Deny(BlockedPattern)),
            ("open", sh("cat disk.img > /dev/nvme0n1"), Deny(BlockedPattern)),
            ("open", sh("echo x > /dev/sda"), Deny(BlockedPattern)),
            ("open", sh(":(){ :|:& };:"), Deny(BlockedPattern)),
            ("open", sh("chmod -R 777 /"), Deny(BlockedPattern)),
            ("open", sh("sudo chown -R me:me /"), Deny(BlockedPattern)),
            ("open", sh("shutdown -h now"), Deny(BlockedPattern)),
            ("open", sh("reboot"), Deny(BlockedPattern)),
            ("open", sh("systemctl poweroff"), Deny(BlockedPattern)),
            ("open", sh("mv ~ /dev/null"), Deny(BlockedPattern)),
            ("open", sh("crontab -r"), Deny(BlockedPattern)),
            ("open", sh("systemctl --user disable --now familiar"), Deny(BlockedPattern)),
            ("open", sh("systemctl --user stop familiar.service"), Deny(BlockedPattern)),
            ("open", sh("systemctl --user reload familiar.service"), Deny(BlockedPattern)),
            ("open", ("systemd_user", json!({"action": "stop", "unit": "familiar.service"})), Deny(BlockedPattern)),
            ("open", ("systemd_user", json!({"action": "restart", "unit": "pipewire.service"})), Allow),
            ("open", sh("pkill familiar"), Deny(BlockedPattern)),
            ("open", sh("killall familiar"), Deny(BlockedPattern)),
            ("open", ("hypr_dispatch", json!({"dispatcher": "exec", "args": "[float] kitty -e rm -rf ~"})), Deny(BlockedPattern)),
            ("open", ("hypr_dispatch", json!({"dispatcher": "workspace", "args": "2"})), Allow),
            ("open", ("desktop_dispatch", json!({"action": "launch", "command": "foot -e rm -rf ~"})), Deny(BlockedPattern)),
            ("open", ("desktop_dispatch", json!({"action": "launch", "program": "foot", "args": ["-e", "rm", "-rf", "~"]})), Deny(BlockedPattern)),
            ("open", ("desktop_dispatch", json!({"action": "move_to_workspace", "workspace": "2"})), Allow),
        ];
        check_table(cases);
    }

    #[test]
    fn protected_paths_are_denied_however_they_are_named() {
        #[rustfmt::skip]
        let cases: &[(&str, (&str, Value), Want)] = &[
            // Protected paths, however they are named.
            ("open", ("read_file", json!({"path": "~/.ssh/id_rsa"})), Deny(ProtectedPath)),
            ("open", ("read_file", json!({"path": "$HOME/.ssh/id_rsa"})), Deny(ProtectedPath)),
            ("open", ("read_file", json!({"path": "../.ssh/id_rsa"})), Deny(ProtectedPath)),
            ("open", ("read_file", json!({"path": "build/../../.ssh/config"})), Deny(ProtectedPath)),
            ("open", ("list_dir", json!({"path": "innocent"})), Deny(ProtectedPath)),
            ("open", ("read_file", json!({"path": "innocent/id_rsa"})), Deny(ProtectedPath)),
            ("open", ("search_files", json!({"path": "~/.gnupg", "pattern": "x"})), Deny(ProtectedPath)),
            ("open", ("write_file", json!({"path": "~/.config/familiar/policies/default.toml", "content": ""})), Deny(ProtectedPath)),
            ("open", ("edit_file", json!({"path": "/etc/sudoers.d/me", "old": "", "new": ""})), Deny(ProtectedPath)),
            ("open", ("disk_usage", json!({"path": "~/.mozilla"})), Deny(ProtectedPath)),
            ("open", ("open", json!({"target": "file:///etc/shadow"})), Deny(ProtectedPath)),
            ("open", ("open", json!({"target": "file://localhost/etc/gshadow"})), Deny(ProtectedPath)),
            ("open", ("shell", json!({"command": "ls", "cwd": "~/.ssh"})), Deny(ProtectedPath)),
            ("open", ("shell", json!({"command": "cat .ssh/id_rsa", "cwd": "~"})), Deny(ProtectedPath)),
            ("open", sh("cat ~/.ssh/*"), Deny(ProtectedPath)),
            ("open", sh("cat ~/.s*/id_rsa"), Deny(ProtectedPath)),
            ("open", sh("cat innocent/id_rsa"), Deny(ProtectedPath)),
            ("open", sh("echo key >> ~/.ssh/authorized_keys"), Deny(ProtectedPath)),
            ("open", sh("grep root < /etc/shadow"), Deny(ProtectedPath)),
            ("open", sh("cp /etc/shadow /tmp/x"), Deny(ProtectedPath)),
            ("open", sh("tar czf /tmp/k.tgz ~/.gnupg"), Deny(ProtectedPath)),
            ("open", sh("cat ~/.{aws,ssh}/credentials"), Deny(ProtectedPath)),
            ("open", sh("cd ~/.ssh && cat id_rsa"), Deny(ProtectedPath)),
            ("open", sh("dd if=$HOME/.ssh/id_rsa of=/tmp/x"), Deny(ProtectedPath)),
            ("default", ("read_file", json!({"path": "~/.kube/config"})), Deny(ProtectedPath)),
            ("strict", ("read_file", json!({"path": "~/.docker/config.json"})), Deny(ProtectedPath)),
            // Neighbours of protected paths are not protected.
            ("open", ("read_file", json!({"path": "~/.sshrc"})), Allow),
            ("open", ("read_file", json!({"path": "~/.kube/cache/x"})), Allow),
        ];
        check_table(cases);
    }

    #[test]
    fn blocked_reason_is_actionable() {
        let w = world();
        let full = grant(ALL_TOOLS, ALLOW_ALL);
        let v = w.decide_with(&full, &w.default, "shell", &json!({"command": "rm -rf ~"}));
        assert_eq!(
            v.decision,
            Decision::Deny {
                rule: BlockedPattern,
                reason: "`rm -rf ~` (runs `rm -f -r ~`) is blocked by policy `default`: recursive \
                         delete of the root, the home directory, a system directory, or of paths \
                         read from input by xargs"
                    .to_owned()
            }
        );
    }
}
