//! `familiar policy check`'s reading of a call's arguments: checked against the tool's
//! own schema (the one the model is given) before the policy is asked, so a misspelt
//! key (`{"cmd": "ls"}` for `shell`) is an error naming the keys the tool takes, not a
//! verdict on a call that could never run.

use serde_json::Value;

/// Checks `args` against `tool`'s schema: each required key present, no key the tool
/// does not take, each value of the declared JSON type. `Ok` for a tool this build
/// does not describe (an MCP tool's schema is its server's).
pub fn check(tool: &str, args: &Value) -> Result<(), String> {
    let registry = crate::tools::Registry::builtin();
    let Some(t) = registry.get(tool) else {
        return Ok(());
    };
    check_against(tool, &t.schema(), args)
}

fn check_against(tool: &str, schema: &Value, args: &Value) -> Result<(), String> {
    let empty = serde_json::Map::new();
    let properties = schema["properties"].as_object().unwrap_or(&empty);
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let takes = || {
        let keys: Vec<String> = properties
            .keys()
            .map(|k| {
                if required.contains(&k.as_str()) {
                    k.clone()
                } else {
                    format!("{k}?")
                }
            })
            .collect();
        if keys.is_empty() {
            format!("`{tool}` takes no arguments")
        } else {
            format!("`{tool}` takes {}", keys.join(", "))
        }
    };
    let Some(given) = args.as_object() else {
        return Err(format!("the arguments must be a JSON object; {}", takes()));
    };
    if let Some(unknown) = given.keys().find(|k| !properties.contains_key(*k)) {
        return Err(format!("`{tool}` has no argument `{unknown}`; {}", takes()));
    }
    if let Some(missing) = required.iter().find(|k| !given.contains_key(**k)) {
        return Err(format!("`{tool}` needs `{missing}`; {}", takes()));
    }
    for (key, value) in given {
        let Some(want) = properties[key]["type"].as_str() else {
            continue;
        };
        let fits = match want {
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            "array" => value.is_array(),
            "object" => value.is_object(),
            _ => true,
        };
        if !fits {
            return Err(format!("`{tool}`'s `{key}` must be a {want}, got {value}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_misspelt_or_missing_key_names_what_the_tool_takes() {
        assert_eq!(
            check("shell", &json!({"cmd": "ls"})),
            Err("`shell` has no argument `cmd`; `shell` takes command, cwd?, timeout_secs?".into())
        );
        assert_eq!(
            check("shell", &json!({})),
            Err("`shell` needs `command`; `shell` takes command, cwd?, timeout_secs?".into())
        );
        assert_eq!(
            check("shell", &json!({"command": 3})),
            Err("`shell`'s `command` must be a string, got 3".into())
        );
        assert_eq!(check("shell", &json!({"command": "ls"})), Ok(()));
        assert_eq!(check("system_snapshot", &json!({})), Ok(()));
        assert_eq!(check("notes__search", &json!({"q": 1})), Ok(()));
    }
}
