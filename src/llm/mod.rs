//! LLM providers.
