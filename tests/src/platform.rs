//! The page as Chromium's accessibility tree reports it, read here straight over the DevTools
//! protocol (not through the runtime's own reading): what every snapshot the suite takes is held
//! to.

use std::collections::HashMap;

use browser_runtime::fence::Handle;
use browser_runtime::page::Role;
use proto::runtime as rt;
use serde_json::{Value, json};

/// One node of the tree, with the DOM element it belongs to.
#[derive(Debug, Clone)]
pub struct TreeNode {
    pub role: String,
    pub name: String,
    pub ignored: bool,
    /// The element's tag (`BUTTON`), when the node is an element's.
    pub tag: String,
    /// Its `id` attribute.
    pub id: Option<String>,
    /// Inside a shadow root the browser made for one of its own controls.
    pub browsers_part: bool,
}

impl TreeNode {
    /// Exposed under a role the snapshot lists (a select's options are chosen through the
    /// select, and a browser-made control's parts are the control's: neither is a node).
    pub fn listed(&self) -> bool {
        !self.ignored && Role::from_code(&self.role).is_some() && self.tag != "OPTION" && !self.browsers_part
    }
}

#[derive(Default)]
struct Dom {
    tag: String,
    id: Option<String>,
    browsers_part: bool,
}

fn walk(node: &Value, in_browsers: bool, out: &mut HashMap<i64, Dom>) {
    if let Some(id) = node["backendNodeId"].as_i64() {
        let attrs: Vec<&str> = node["attributes"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        let dom_id = attrs.chunks(2).find(|kv| kv[0] == "id").and_then(|kv| kv.get(1)).map(|v| (*v).to_owned());
        let tag = node["nodeName"].as_str().unwrap_or_default().to_owned();
        out.insert(id, Dom { tag, id: dom_id, browsers_part: in_browsers });
    }
    for root in node["shadowRoots"].as_array().into_iter().flatten() {
        walk(root, in_browsers || root["shadowRootType"] == "user-agent", out);
    }
    for child in node["children"].as_array().into_iter().flatten() {
        walk(child, in_browsers, out);
    }
}

/// The tab's top document's tree, each node with its element; `None` when Chromium answers with
/// another document's tree (seen with a speculation rule on the page: the runtime then names
/// each node one by one, and the whole-tree check has nothing to hold it to).
pub async fn read(h: &Handle) -> Option<Vec<TreeNode>> {
    let (session, frame) = h.tab().expect("a tab is attached");
    let doc = h.call(Some(&session), "DOM.getDocument", json!({ "depth": -1, "pierce": true })).await.expect("DOM");
    let mut dom = HashMap::new();
    walk(&doc["root"], false, &mut dom);
    // The top document's, named: unnamed, Chromium may answer with a document a speculation rule
    // fetched.
    let params = json!({ "frameId": frame });
    let tree = h.call(Some(&session), "Accessibility.getFullAXTree", params).await.expect("the tree");
    let root = tree["nodes"][0]["backendDOMNodeId"].as_i64();
    if root.is_none() || root != doc["root"]["backendNodeId"].as_i64() {
        return None;
    }
    let nodes = tree["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| {
            let d = dom.remove(&n["backendDOMNodeId"].as_i64()?).unwrap_or_default();
            Some(TreeNode {
                role: n["role"]["value"].as_str().unwrap_or_default().to_owned(),
                name: n["name"]["value"].as_str().unwrap_or_default().to_owned(),
                ignored: n["ignored"].as_bool().unwrap_or(false),
                tag: d.tag,
                id: d.id,
                browsers_part: d.browsers_part,
            })
        })
        .collect();
    Some(nodes)
}

/// The tree node of the element with `id`.
pub fn by_id<'a>(tree: &'a [TreeNode], id: &str) -> &'a TreeNode {
    tree.iter().find(|n| n.id.as_deref() == Some(id)).unwrap_or_else(|| panic!("no tree node for #{id}"))
}

/// A snapshot node's role as the tree spells it.
pub fn role_code(node: &rt::Node) -> String {
    let name = rt::Role::try_from(node.role).map_or("", |r| r.as_str_name());
    name.trim_start_matches("ROLE_").to_ascii_lowercase()
}

/// A name as the snapshot carries it: HTML white space flattened, as ARIA's flat string, and cut
/// where every label source is cut.
pub fn cut(name: &str) -> String {
    browser_runtime::platform::flat(name).chars().take(classifier::coverage::MAX_LABEL_CHARS).collect()
}

/// The snapshot agrees with the tree: every node the tree exposes under a role of the set is
/// listed with the tree's role and name, and every other listed node is an element the tree
/// exposes under another role, listed with the tree's name.
pub fn agree(tree: &[TreeNode], o: &rt::ObserveReply) -> Result<(), String> {
    let mut listed: HashMap<(String, String), i64> = HashMap::new();
    for n in &o.nodes {
        *listed.entry((role_code(n), n.name.clone())).or_default() += 1;
    }
    for t in tree.iter().filter(|t| t.listed()) {
        let key = (t.role.clone(), cut(&t.name));
        let left = listed
            .get_mut(&key)
            .filter(|l| **l > 0)
            .ok_or_else(|| format!("the tree's {key:?} is not listed as such (or fewer times than the tree has it)"))?;
        *left -= 1;
    }
    // What is left the runtime listed on its own reading: each an element the tree exposes under
    // another role, with the tree's name.
    let mut others: HashMap<String, i64> = HashMap::new();
    for t in tree.iter().filter(|t| !t.ignored && !t.listed() && !t.tag.is_empty() && !t.tag.starts_with('#')) {
        *others.entry(cut(&t.name)).or_default() += 1;
    }
    for ((role, name), left) in listed.iter().filter(|(_, left)| **left > 0) {
        let have = others.entry(name.clone()).or_default();
        if *have < *left {
            return Err(format!("{role} {name:?} is listed {left} more times than the tree exposes such an element"));
        }
        *have -= left;
    }
    Ok(())
}
