//! The roles and names the browser itself gives: Chromium's accessibility tree, read over
//! DevTools. A snapshot's role and name come from here, so what the model quotes, what an act
//! re-checks and what the owner's card quotes is what a screen reader announces. `read.js` keeps
//! what the tree does not give: every label source the classifier reads, field kinds, targets,
//! forms and state.
//!
//! One rule joins the two ([`shown`]): the tree decides the role and name of every element it
//! exposes under a role of the closed set; an element the runtime's read takes for interactive
//! but the tree exposes under another role stays listed (deny-biased: it can then be refused,
//! never silently missing) with the runtime's role and the tree's name, empty where the tree
//! gives none (an unnamed node no tool can name); an element the tree hides (`aria-hidden`, not
//! rendered), or has no node for, is not listed: no screen reader would announce it either.
//!
//! A name is the tree's with each run of white space made one space and its ends trimmed, as
//! the name is announced: `<label>Your answer <input></label>` is "Your answer", not "Your
//! answer ", and a no-break space reads as the space it shows. Nothing else is changed: a
//! zero-width or format character stays, for the classifier and the owner to see through.
//!
//! Only the top document is read: the runtime acts there alone, and a frame's document is an
//! embedded target outside every origin (`read.js`), so its controls are not nodes.

use std::collections::HashMap;

use futures_util::future::join_all;
use serde_json::{Value, json};

use crate::fence::{FenceError, Handle};
use crate::guard;
use crate::role::Role;

/// One DOM node as the accessibility tree shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exposed {
    /// Chromium's role: an ARIA role's name, or one of its own (`DisclosureTriangle`, `Date`).
    pub role: String,
    pub name: String,
    /// The tree leaves the node out (hidden from assistive technology, or not rendered).
    pub ignored: bool,
}

impl Exposed {
    /// Its role, when that is one of the closed set.
    pub fn listed_role(&self) -> Option<Role> {
        if self.ignored { None } else { Role::from_code(&self.role) }
    }
}

/// The tree of the tab's top document, by backend DOM node id, in the tree's order.
#[derive(Debug, Default)]
pub struct Tree {
    pub order: Vec<i64>,
    pub nodes: HashMap<i64, Exposed>,
}

/// `name` with each run of white space (Unicode's, as the old read's `\s`) one space, and none at
/// either end.
pub fn flat(name: &str) -> String {
    name.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn exposed(v: &Value) -> Option<(i64, Exposed)> {
    let id = v["backendDOMNodeId"].as_i64()?;
    let text = |key: &str| v[key]["value"].as_str().unwrap_or_default();
    let ignored = v["ignored"].as_bool().unwrap_or(false);
    Some((id, Exposed { role: text("role").to_owned(), name: flat(text("name")), ignored }))
}

/// The whole tree of the tab's top document (`frame`, named: without it Chromium may answer with
/// another document's tree, such as a page a speculation rule fetched), in one call.
pub async fn tree(h: &Handle, session: &str, frame: &str) -> Result<Tree, FenceError> {
    let params = json!({ "frameId": frame });
    let r = h.call_within(Some(session), "Accessibility.getFullAXTree", params, guard::READ_BOUND).await?;
    let nodes = r["nodes"].as_array().ok_or_else(|| shape("Accessibility.getFullAXTree"))?;
    let mut tree = Tree::default();
    for (id, node) in nodes.iter().filter_map(exposed) {
        // A DOM node has one tree node; the first is kept should the tree repeat one.
        if let std::collections::hash_map::Entry::Vacant(e) = tree.nodes.entry(id) {
            tree.order.push(id);
            e.insert(node);
        }
    }
    Ok(tree)
}

/// Whether `tree` is the tab's current document's: its root is the document's node. With a
/// speculation rule on the page, Chromium has been seen answering with another document's tree.
pub async fn is_documents(h: &Handle, session: &str, tree: &Tree) -> Result<bool, FenceError> {
    let doc = h.call(Some(session), "DOM.getDocument", json!({ "depth": 0 })).await?;
    let root = doc["root"]["backendNodeId"].as_i64();
    Ok(root.is_some() && tree.order.first().copied() == root)
}

/// Each node of the live tree, asked one by one, all at once: the way to name nodes when the
/// whole tree came back as another document's.
pub async fn each(h: &Handle, session: &str, ids: &[i64]) -> Result<HashMap<i64, Exposed>, FenceError> {
    let asks = ids.iter().map(|id| one(h, session, *id));
    let mut out = HashMap::new();
    for (id, node) in ids.iter().zip(join_all(asks).await) {
        if let Some(node) = gone(node)?.flatten() {
            out.insert(*id, node);
        }
    }
    Ok(out)
}

/// One node of the live tree: `None` when the tree has no node for it.
pub async fn one(h: &Handle, session: &str, backend_id: i64) -> Result<Option<Exposed>, FenceError> {
    let params = json!({ "backendNodeId": backend_id, "fetchRelatives": false });
    let r = h.call(Some(session), "Accessibility.getPartialAXTree", params).await?;
    let nodes = r["nodes"].as_array().into_iter().flatten();
    Ok(nodes.filter_map(exposed).find(|(id, _)| *id == backend_id).map(|(_, n)| n))
}

/// The nodes the tree exposes under a role of the closed set, in its order.
pub fn listed(tree: &Tree) -> Vec<(i64, Role, String)> {
    tree.order
        .iter()
        .filter_map(|id| {
            let n = &tree.nodes[id];
            n.listed_role().map(|r| (*id, r, n.name.clone()))
        })
        .collect()
}

/// A reply the browser cannot have made.
fn shape(method: &str) -> FenceError {
    FenceError::Refused { method: method.to_owned(), message: "the reply has an unexpected shape".into() }
}

/// A node the browser no longer knows (it left the document between two calls): absent, not a
/// failed read. Anything else (a dialog, a call past its bound, a closed connection) fails it.
fn gone<T>(r: Result<T, FenceError>) -> Result<Option<T>, FenceError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(FenceError::Refused { message, .. })
            if message.contains("No node") || message.contains("find node") || message.contains("not found") =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Each node as a remote object in the guard's world (in its read group), all asked at once;
/// `None` for a node that left the document meanwhile.
pub async fn resolve(
    h: &Handle,
    (session, ctx): &(String, i64),
    ids: &[i64],
) -> Result<Vec<Option<String>>, FenceError> {
    let asks = ids.iter().map(|id| {
        let params = json!({ "backendNodeId": id, "executionContextId": ctx, "objectGroup": guard::READ_GROUP });
        h.call(Some(session), "DOM.resolveNode", params)
    });
    let mut out = Vec::with_capacity(ids.len());
    for r in join_all(asks).await {
        out.push(gone(r)?.and_then(|v| v["object"]["objectId"].as_str().map(str::to_owned)));
    }
    Ok(out)
}

/// The backend node id of every item of a remote array of nodes, in order.
pub async fn backend_ids(h: &Handle, session: &str, array: &Value) -> Result<Vec<Option<i64>>, FenceError> {
    let Some(id) = array["objectId"].as_str() else { return Err(shape("the read's own elements")) };
    let r = h.call(Some(session), "Runtime.getProperties", json!({ "objectId": id, "ownProperties": true })).await?;
    let mut items: Vec<(usize, String)> = r["result"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p["name"].as_str()?.parse().ok()?, p["value"]["objectId"].as_str()?.to_owned())))
        .collect();
    items.sort_unstable_by_key(|(i, _)| *i);
    let asks = items.iter().map(|(_, object)| h.call(Some(session), "DOM.describeNode", json!({ "objectId": object })));
    let described = join_all(asks).await;
    let mut out = vec![None; items.last().map_or(0, |(i, _)| i + 1)];
    for ((i, _), d) in items.iter().zip(described) {
        out[*i] = gone(d)?.and_then(|d| d["node"]["backendNodeId"].as_i64());
    }
    Ok(out)
}

/// The role and name a node the runtime's read listed shows, given its tree node: the tree's
/// role and name for a role of the closed set; the runtime's role with the tree's name for an
/// element the tree exposes under another role; `None`, not listed, where the tree hides it or
/// has no node for it.
pub fn shown(own_role: Option<Role>, tree: Option<&Exposed>) -> Option<(Option<Role>, String)> {
    let node = tree.filter(|n| !n.ignored)?;
    Some((node.listed_role().or(own_role), node.name.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(role: &str, name: &str, ignored: bool) -> Exposed {
        Exposed { role: role.into(), name: name.into(), ignored }
    }

    #[test]
    fn white_space_is_flattened_and_nothing_else() {
        assert_eq!(flat("  Your answer \n"), "Your answer");
        assert_eq!(flat("a\t\r\n\x0cb"), "a b");
        assert_eq!(flat("Pay\u{a0}now\u{200b}"), "Pay now\u{200b}");
    }

    #[test]
    fn the_tree_decides_where_it_lists_and_hides() {
        type Case = (Option<Exposed>, Option<(Option<Role>, &'static str)>);
        let cases: [Case; 6] = [
            (Some(node("button", "Delete account", false)), Some((Some(Role::Button), "Delete account"))),
            (
                Some(node("spinbutton", "Flash the screen times", false)),
                Some((Some(Role::SpinButton), "Flash the screen times")),
            ),
            // A summary is a disclosure triangle to Chromium: listed as the runtime reads it.
            (Some(node("DisclosureTriangle", "More", false)), Some((Some(Role::Link), "More"))),
            // An editable region is a generic container to Chromium, with no name of its own.
            (Some(node("generic", "", false)), Some((Some(Role::Link), ""))),
            (Some(node("textbox", "Secret", true)), None),
            (None, None),
        ];
        for (tree, expect) in cases {
            let got = shown(Some(Role::Link), tree.as_ref());
            assert_eq!(got, expect.map(|(r, n)| (r, n.to_owned())), "{tree:?}");
        }
    }
}
