//! The fallback model and provider: each takes over when the primary is overloaded
//! and gets its own retries with backoff.
// Test helpers: a failed setup step should fail the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use familiar::llm::{ClientEvent, LlmError};
use serde_json::json;

use super::*;
use crate::common::llm_server::*;

#[tokio::test]
async fn repeated_overload_switches_to_the_fallback_model_for_good() {
    for wire in WIRES {
        let overloaded = Reply::status(
            wire.overload_status(),
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        );
        let server = LlmServer::start(vec![
            overloaded.clone(),
            overloaded,
            Reply::sse(wire.text("from the small one")),
            Reply::sse(wire.text("still small")),
        ])
        .await;
        let mut cfg = wire.config(&server);
        cfg.fallback_model = Some("small-model".into());
        let mut client = client(&cfg);
        let req = request(&cfg);
        let (events, err) = run(&mut client, &req).await;
        assert_eq!(err, None, "{wire:?}");
        let fallback = ClientEvent::ModelFallback {
            from: "main-model".into(),
            to: "small-model".into(),
        };
        let at = events.iter().position(|e| *e == fallback).unwrap();
        assert_eq!(
            events[at + 1],
            ClientEvent::Retry {
                attempt: 2,
                delay: Duration::ZERO,
                reason: format!("overloaded ({}): Overloaded", wire.overload_status()),
            }
        );
        let (events, err) = run(&mut client, &req).await;
        assert_eq!(err, None);
        assert_eq!(text_of(&events), "still small");
        let models: Vec<_> = server
            .requests()
            .iter()
            .map(|r| r.body["model"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            models,
            ["main-model", "main-model", "small-model", "small-model"]
        );
    }
}

fn overloaded(wire: Wire) -> Reply {
    Reply::status(
        wire.overload_status(),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    )
}

fn models_asked(server: &LlmServer) -> Vec<String> {
    server
        .requests()
        .iter()
        .map(|r| r.body["model"].as_str().unwrap().to_owned())
        .collect()
}

// Regression: with max_retries = 2, the primary's two overloads made the client fall
// back, and the fallback's first overload ended the task: it had no retries of its own.
#[tokio::test]
async fn the_fallback_model_gets_its_own_retries_with_backoff() {
    for wire in WIRES {
        let server = LlmServer::start(vec![
            overloaded(wire),
            overloaded(wire),
            overloaded(wire),
            Reply::sse(wire.text("small but there")),
        ])
        .await;
        let mut cfg = wire.config(&server);
        cfg.max_retries = 2;
        cfg.fallback_model = Some("small-model".into());
        let (events, err) = run(&mut client(&cfg), &request(&cfg)).await;
        assert_eq!(err, None, "{wire:?}");
        assert_eq!(text_of(&events), "small but there");
        let delays = retries(&events);
        assert_eq!(delays.len(), 3, "{wire:?}: {events:?}");
        // Primary: backoff, then the switch (no wait); fallback: backoff from the start.
        assert!(delays[0].1 >= Duration::from_millis(500), "{delays:?}");
        assert_eq!(delays[1], (2, Duration::ZERO));
        assert_eq!(delays[2].0, 3);
        assert!(
            delays[2].1 >= Duration::from_millis(500) && delays[2].1 <= Duration::from_secs(1),
            "{delays:?}"
        );
        assert_eq!(
            models_asked(&server),
            ["main-model", "main-model", "small-model", "small-model"]
        );
    }
}

#[tokio::test]
async fn the_fallback_gives_up_after_its_own_max_retries() {
    for wire in WIRES {
        let server = LlmServer::start(vec![overloaded(wire); 5]).await;
        let mut cfg = wire.config(&server);
        cfg.max_retries = 2;
        cfg.fallback_model = Some("small-model".into());
        let (events, err) = run(&mut client(&cfg), &request(&cfg)).await;
        let err = err.unwrap();
        assert!(
            matches!(&err, LlmError::RetriesExhausted { attempts: 5, last } if last.is_overload()),
            "{wire:?}: {err:?}"
        );
        let fallbacks = events
            .iter()
            .filter(|e| matches!(e, ClientEvent::ModelFallback { .. }))
            .count();
        assert_eq!(fallbacks, 1);
        assert_eq!(
            models_asked(&server),
            [
                "main-model",
                "main-model",
                "small-model",
                "small-model",
                "small-model"
            ]
        );
    }
}

/// `fallback_provider` names another `[providers.*]` table: read from a real config
/// file, its own server, key and model take over after the primary's overloads.
#[tokio::test]
async fn a_fallback_provider_by_name_takes_over_with_its_own_key() {
    for wire in WIRES {
        let primary = LlmServer::start(vec![overloaded(wire), overloaded(wire)]).await;
        let backup = LlmServer::start(vec![
            overloaded(Wire::OpenAi),
            Reply::sse(Wire::OpenAi.text("from the backup")),
            Reply::sse(Wire::OpenAi.text("backup again")),
        ])
        .await;
        let primary_cfg = wire.config(&primary);
        let kind = match wire {
            Wire::OpenAi => "openai",
            Wire::Anthropic => "anthropic",
        };
        let toml = format!(
            r#"
default_provider = "main"

[providers.main]
kind = "{kind}"
base_url = "{}"
model = "main-model"
api_key_env = "{KEY_VAR}"
max_retries = 2
fallback_provider = "backup"

[providers.backup]
kind = "openai"
base_url = "{}/v1"
model = "backup-model"
api_key_env = "BACKUP_KEY"
"#,
            primary_cfg.base_url, backup.base
        );
        let mut env = env();
        env.insert("BACKUP_KEY".into(), "sk-backup-key".into());
        env.insert("HOME".into(), "/nonexistent".into());
        let config = familiar::config::Config::from_toml("config.toml", &toml, &env).unwrap();
        let cfg = config.provider(None).unwrap();
        let mut client =
            LlmClient::from_config(cfg, &env, &|name| config.providers.get(name).cloned())
                .unwrap()
                .with_retry(RetryPolicy {
                    max_retries: cfg.max_retries,
                    sleeper: Sleeper::none(),
                    ..RetryPolicy::default()
                });
        let req = request(cfg);
        let (events, err) = run(&mut client, &req).await;
        assert_eq!(err, None, "{wire:?}");
        assert_eq!(text_of(&events), "from the backup");
        assert!(events.contains(&ClientEvent::ModelFallback {
            from: "main-model".into(),
            to: "backup/backup-model".into(),
        }));
        let (events, err) = run(&mut client, &req).await;
        assert_eq!(err, None);
        assert_eq!(text_of(&events), "backup again");
        assert_eq!(models_asked(&primary), ["main-model", "main-model"]);
        assert_eq!(
            models_asked(&backup),
            ["backup-model", "backup-model", "backup-model"]
        );
        for r in backup.requests() {
            assert_eq!(r.path, "/v1/chat/completions");
            assert_eq!(r.headers["authorization"], "Bearer sk-backup-key");
        }
    }
}
