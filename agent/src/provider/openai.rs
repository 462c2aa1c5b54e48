//! OpenAI-compatible chat completions: the system prompt and the step's prompt as messages, the
//! tools as functions, the answer's tool calls and text read back as a turn.

use serde_json::{Value, json};

use super::reply::{arguments, split_text};
use crate::model::{ModelError, Turn};
use crate::tools::tools;

pub(super) fn body(model: &str, system: &str, prompt: &str) -> Value {
    let functions: Vec<Value> = tools()
        .into_iter()
        .map(|t| {
            json!({ "type": "function", "function": {
                "name": t.name, "description": t.description, "parameters": t.input_schema } })
        })
        .collect();
    json!({
        "model": model,
        "messages": [
            { "role": "system", "content": system },
            { "role": "user", "content": prompt },
        ],
        "tools": functions,
        // "auto", not "required": a forced call comes without the text that carries the
        // evidence line. A reply with no call is refused by the rules, and counted.
        "tool_choice": "auto",
        "parallel_tool_calls": false,
        // No token cap: its name differs between OpenAI's models and the servers that speak
        // the API; the reply's size is bounded by the client instead.
    })
}

/// The turn a chat-completions answer holds: every tool call (arguments that are not JSON kept
/// as a string, which the rules refuse) and the text as the evidence line and any extra.
pub fn turn_of(answer: &Value) -> Result<Turn, ModelError> {
    let message = &answer["choices"][0]["message"];
    if !message.is_object() {
        return Err(ModelError("answered without choices[0].message".into()));
    }
    let calls = message["tool_calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .map(|c| {
                    let name = c["function"]["name"].as_str().unwrap_or_default().to_owned();
                    (name, arguments(c["function"]["arguments"].as_str().unwrap_or_default()))
                })
                .collect()
        })
        .unwrap_or_default();
    let (evidence, extra) = split_text(message["content"].as_str().unwrap_or_default());
    Ok(Turn { calls, evidence, extra })
}
