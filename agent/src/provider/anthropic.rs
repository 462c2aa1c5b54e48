//! Anthropic's Messages API: the system prompt as `system`, the step's prompt as the user's
//! message, the tools with their input schemas; the answer's `tool_use` blocks and text blocks
//! read back as a turn.

use serde_json::{Value, json};

use super::reply::split_text;
use crate::model::{ModelError, Turn};
use crate::tools::tools;

pub(super) fn body(model: &str, max_tokens: u32, system: &str, prompt: &str) -> Value {
    let tools: Vec<Value> = tools()
        .into_iter()
        .map(|t| json!({ "name": t.name, "description": t.description, "input_schema": t.input_schema }))
        .collect();
    json!({
        "model": model,
        "max_tokens": max_tokens,
        "system": system,
        "messages": [{ "role": "user", "content": prompt }],
        "tools": tools,
        // "auto": with "any" the API writes no text before the call, and the text is the
        // evidence line. Parallel calls off: a turn is one call.
        "tool_choice": { "type": "auto", "disable_parallel_tool_use": true },
    })
}

/// The turn a Messages answer holds: every `tool_use` block (its input as given) and the text
/// blocks as the evidence line and any extra.
pub fn turn_of(answer: &Value) -> Result<Turn, ModelError> {
    let Some(content) = answer["content"].as_array() else {
        return Err(ModelError("answered without a content list".into()));
    };
    let mut calls = Vec::new();
    let mut text = String::new();
    for block in content {
        match block["type"].as_str() {
            Some("tool_use") => {
                calls.push((block["name"].as_str().unwrap_or_default().to_owned(), block["input"].clone()));
            }
            Some("text") => {
                text.push_str(block["text"].as_str().unwrap_or_default());
                text.push('\n');
            }
            // Thinking and other blocks are not the turn.
            _ => {}
        }
    }
    let (evidence, extra) = split_text(&text);
    Ok(Turn { calls, evidence, extra })
}
