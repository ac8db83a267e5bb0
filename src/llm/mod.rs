//! LLM providers: the message model shared by the loop, the store and the providers.
//!
//! [`Message`] and [`ContentBlock`] are familiar's own canonical conversation format:
//! they are what the session context persists (`history`) and what each provider
//! translates to its wire format. Tool arguments are kept as parsed JSON.

use serde::{Deserialize, Serialize};

use crate::ids::CallId;

/// Who said it. System prompts are not messages: they travel beside them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
}

/// One block of a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    /// Model reasoning, kept with its signature so it can be sent back (Anthropic
    /// rejects a tool-use turn whose thinking was dropped or altered).
    Thinking {
        thinking: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    ToolUse {
        id: CallId,
        name: String,
        input: serde_json::Value,
    },
    ToolResult {
        tool_use_id: CallId,
        content: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<ContentBlock>,
}

impl Message {
    pub fn user_text(text: impl Into<String>) -> Self {
        Message {
            role: Role::User,
            content: vec![ContentBlock::Text { text: text.into() }],
        }
    }

    pub fn assistant_text(text: impl Into<String>) -> Self {
        Message {
            role: Role::Assistant,
            content: vec![ContentBlock::Text { text: text.into() }],
        }
    }
}

/// Token usage as the server reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_read_tokens: u64,
    #[serde(default)]
    pub cache_write_tokens: u64,
}

impl Usage {
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
    }

    pub fn total(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_serialise_with_tagged_blocks() {
        let m = Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Text { text: "hi".into() },
                ContentBlock::ToolUse {
                    id: CallId::from_provider("c1"),
                    name: "read_file".into(),
                    input: json!({"path": "/tmp/x"}),
                },
            ],
        };
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(
            v,
            json!({"role": "assistant", "content": [
                {"type": "text", "text": "hi"},
                {"type": "tool_use", "id": "c1", "name": "read_file", "input": {"path": "/tmp/x"}}
            ]})
        );
        assert_eq!(serde_json::from_value::<Message>(v).unwrap(), m);
    }
}
