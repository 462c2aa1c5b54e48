//! `grantctl classify`: one JSON line in, one JSON line out, so operators and outside test
//! suites can ask what the classifier decides about an element.

use std::io::{BufRead, Write};

use classifier::{Action, ElementFacts, Grant, PageFacts, TaskScope, classify, covers};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GrantInput {
    origin: String,
    path_prefix: String,
    #[serde(default = "full_cap")]
    chars_remaining: u32,
}

fn full_cap() -> u32 {
    authorizer::limits::MAX_TYPED_CHARS
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    action: Action,
    #[serde(default)]
    element: ElementFacts,
    #[serde(default)]
    page_url: String,
    grant: Option<GrantInput>,
}

/// The answer for one input line.
pub fn answer(line: &str) -> Value {
    let input: Input = match serde_json::from_str(line) {
        Ok(i) => i,
        Err(e) => return json!({ "error": format!("malformed input: {e}") }),
    };
    let page = PageFacts { url: input.page_url };
    let consequence = classify(&input.element, &page);
    let task_grant = input.grant.map(|g| {
        let grant =
            Grant::Task(TaskScope { origin: g.origin, path_prefix: g.path_prefix, chars_remaining: g.chars_remaining });
        match covers(&grant, &input.action, &input.element, &page) {
            Ok(()) => json!({ "covered": true, "reason": null }),
            Err(e) => json!({ "covered": false, "reason": e.reason.code(), "detail": e.detail }),
        }
    });
    json!({ "consequence": consequence.code(), "task_grant": task_grant })
}

/// Answers every line of `input` on `output`, blank lines skipped.
pub fn run(input: impl BufRead, mut output: impl Write) -> std::io::Result<()> {
    for line in input.lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        writeln!(output, "{}", answer(&line))?;
    }
    output.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_in_lines_out() {
        let input = concat!(
            r#"{"action":{"kind":"click"},"element":{"role":"button","name":"Continue","aria_label":"Continue","visible_text":"Pay $12.99"},"page_url":"https://www.lesson.test/lesson/1","grant":{"origin":"https://www.lesson.test","path_prefix":"/lesson"}}"#,
            "\n",
            "not json\n",
            r#"{"action":{"kind":"type","text":"el gato"},"element":{"role":"textbox","name":"Answer","field_kind":"text"},"page_url":"https://www.lesson.test/lesson/1","grant":{"origin":"https://www.lesson.test","path_prefix":"/lesson","chars_remaining":10}}"#,
            "\n",
            r#"{"action":{"kind":"click"},"element":{"name":"Next"}}"#,
            "\n",
        );
        let mut out = Vec::new();
        run(input.as_bytes(), &mut out).unwrap();
        let lines: Vec<Value> =
            String::from_utf8(out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0]["consequence"], "payment");
        assert_eq!(lines[0]["task_grant"]["covered"], false);
        assert_eq!(lines[0]["task_grant"]["reason"], "payment");
        assert!(lines[1]["error"].as_str().unwrap().starts_with("malformed input"));
        assert_eq!(lines[2]["task_grant"]["covered"], true);
        assert_eq!(lines[3]["consequence"], "routine");
        assert_eq!(lines[3]["task_grant"], Value::Null);
    }
}
