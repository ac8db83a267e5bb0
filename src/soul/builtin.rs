//! The shipped souls and their persona prompts, compiled in.

/// The shipped souls: (id, TOML source).
pub const BUILTIN_SOULS: &[(&str, &str)] = &[
    (
        "safe_assistant",
        include_str!("../../souls/safe_assistant.toml"),
    ),
    (
        "system_admin",
        include_str!("../../souls/system_admin.toml"),
    ),
    (
        "automation_agent",
        include_str!("../../souls/automation_agent.toml"),
    ),
    (
        "research_agent",
        include_str!("../../souls/research_agent.toml"),
    ),
    ("maintenance", include_str!("../../souls/maintenance.toml")),
    ("desktop", include_str!("../../souls/desktop.toml")),
];

const BUILTIN_PROMPTS: &[(&str, &str)] = &[
    (
        "prompts/safe_assistant.md",
        include_str!("../../souls/prompts/safe_assistant.md"),
    ),
    (
        "prompts/system_admin.md",
        include_str!("../../souls/prompts/system_admin.md"),
    ),
    (
        "prompts/automation_agent.md",
        include_str!("../../souls/prompts/automation_agent.md"),
    ),
    (
        "prompts/research_agent.md",
        include_str!("../../souls/prompts/research_agent.md"),
    ),
    (
        "prompts/maintenance.md",
        include_str!("../../souls/prompts/maintenance.md"),
    ),
    (
        "prompts/desktop.md",
        include_str!("../../souls/prompts/desktop.md"),
    ),
];

pub(super) fn builtin_prompt(name: &str) -> Option<&'static str> {
    BUILTIN_PROMPTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
}

/// A shipped soul as the files `familiar souls copy` writes: its TOML, and the prompt
/// file it names (the path relative to the soul file, and the text).
pub struct ShippedFiles {
    pub toml: &'static str,
    pub prompt: Option<(&'static str, &'static str)>,
}

/// The files of the shipped soul `id`, if there is one.
pub fn shipped_files(id: &str) -> Option<ShippedFiles> {
    let (_, toml) = BUILTIN_SOULS.iter().find(|(i, _)| *i == id)?;
    // Each shipped soul names its prompt as `prompt_file = "prompts/ID.md"`.
    let prompt = BUILTIN_PROMPTS
        .iter()
        .find(|(name, _)| toml.contains(&format!("prompt_file = \"{name}\"")))
        .copied();
    Some(ShippedFiles { toml, prompt })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use familiar_protocol::tier::{Mode, Tier};

    use super::*;
    use crate::soul::tests::policy;
    use crate::soul::{PromptSource, SoulOrigin, parse};

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
    fn every_shipped_soul_has_its_prompt_to_copy() {
        for (id, _) in BUILTIN_SOULS {
            let files = shipped_files(id).unwrap();
            let (name, text) = files.prompt.unwrap_or_else(|| panic!("{id}: no prompt"));
            assert_eq!(name, format!("prompts/{id}.md"));
            assert!(!text.trim().is_empty());
        }
        assert!(shipped_files("nosuch").is_none());
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
}
