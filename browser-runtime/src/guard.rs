//! The click guard and the focus check (`guard.js`), driven over the browser's DevTools
//! connection in the guard's isolated world: the page can neither see these calls nor forge
//! their answers. An act arms the guard on the element its read covered, just before the input
//! (frames stop every trusted input always; their counts are read too); after the input,
//! [`after`] waits a few turns of the page's event loop and reports what the guard stopped.

use std::time::{Duration, Instant};

use fantoccini::elements::ElementRef;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::fence::{Armed, FenceError, Handle, WORLD};

/// The longest a page is waited for to settle: after an act's input, or for a read.
pub const BOUND: Duration = Duration::from_secs(5);

/// The page a read saw. Empty values travel as absent ones.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct PageRead {
    pub url: String,
    pub title: String,
    /// `performance.timeOrigin`: a new document has a new one.
    pub time_origin: f64,
    /// A digest of what the accessibility tree is made of (roles, names, values, states, text):
    /// it differs after an act that changed anything a snapshot shows. Empty when unread.
    #[serde(default)]
    pub sig: String,
    /// Where focus is (the focused element's place in the walk).
    #[serde(default)]
    pub focus: String,
}

/// What the guard holds for the act.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardMode {
    /// Hit-test the element's centre; stop trusted presses and clicks aimed at what the read did
    /// not cover.
    Click,
    /// Focus the element and refuse unless it holds focus; stop key and text events aimed
    /// elsewhere.
    Keys,
    /// Neither test: stop uncovered clicks and every key (a select chosen by the runtime).
    Hold,
}

impl GuardMode {
    fn code(self) -> &'static str {
        match self {
            Self::Click => "click",
            Self::Keys => "keys",
            Self::Hold => "hold",
        }
    }
}

/// Turns of the page's event loop an act waits for after its input: everything it queued
/// without delay (a handler's zero-delay timer, a refresh with no delay) has run after them.
pub const TURNS: u32 = 3;

/// The guard armed for one act: the arming to finish and the frames whose stops it counts.
#[derive(Debug)]
pub struct Held {
    arming: u64,
    /// (DevTools session, execution context) of each frame's guard at arming.
    frames: Vec<(String, i64)>,
}

/// What the guard saw between arming and the end of the act.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct GuardReport {
    /// `armed` (this arming held), `other` (another arming replaced it) or `none`.
    pub held: String,
    /// Presses, clicks, keys and text events it stopped, in the page and in its frames.
    pub stopped: u64,
    /// False when the document was reopened and the guard's listeners are gone.
    pub alive: bool,
    /// Whether a trusted click reached the element (click mode).
    pub reached: bool,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawArm {
    arming: Option<u64>,
    refused: Option<String>,
}

/// `f.<frame>.d.<document>.e.<backend node>`: how chromedriver names an element.
fn frame_and_node(element: &ElementRef) -> Option<(String, i64)> {
    let id = element.to_string();
    let rest = id.strip_prefix("f.")?;
    let (frame, rest) = rest.split_once(".d.")?;
    let (_, node) = rest.rsplit_once(".e.")?;
    Some((frame.to_owned(), node.parse().ok()?))
}

fn tab(h: &Handle) -> Result<(String, String), FenceError> {
    h.tab().ok_or_else(|| FenceError::Endpoint("no tab is attached".into()))
}

/// The guard's execution context in `frame`, through `session`.
async fn context(h: &Handle, session: &str, frame: &str) -> Result<i64, FenceError> {
    let r = h.call(Some(session), "Page.createIsolatedWorld", json!({ "frameId": frame, "worldName": WORLD })).await?;
    r["executionContextId"].as_i64().ok_or_else(|| FenceError::Endpoint("no execution context".into()))
}

/// Evaluates `expression` in context `ctx` and returns its value.
async fn eval(h: &Handle, session: &str, ctx: i64, expression: &str) -> Result<Value, FenceError> {
    let params = json!({ "expression": expression, "contextId": ctx, "awaitPromise": true, "returnByValue": true });
    let mut r = h.call(Some(session), "Runtime.evaluate", params).await?;
    thrown(&r, "Runtime.evaluate")?;
    Ok(r["result"]["value"].take())
}

fn thrown(r: &Value, method: &str) -> Result<(), FenceError> {
    match r.get("exceptionDetails") {
        Some(e) => Err(FenceError::Refused {
            method: method.to_owned(),
            message: e["exception"]["description"].as_str().or(e["text"].as_str()).unwrap_or_default().to_owned(),
        }),
        None => Ok(()),
    }
}

/// Child frame ids of a frame tree, depth first.
fn children(tree: &Value, out: &mut Vec<String>) {
    for child in tree["childFrames"].as_array().into_iter().flatten() {
        if let Some(id) = child["frame"]["id"].as_str() {
            out.push(id.to_owned());
        }
        children(child, out);
    }
}

/// Arms the guard on `element` (which must be in the tab's top document): `Err(why)` when the
/// element cannot take the act.
pub async fn arm(h: &Handle, element: &ElementRef, mode: GuardMode) -> Result<Result<Held, String>, FenceError> {
    let (session, main) = tab(h)?;
    let Some((frame, node)) = frame_and_node(element) else {
        return Ok(Err("the driver named the node in a way the guard cannot follow".into()));
    };
    if frame != main {
        return Ok(Err("the node is not in the page's top document".into()));
    }
    // From zero: what the frames stop from here on is this act's.
    let frames = frames(h, &session).await;
    let ctx = context(h, &session, &main).await?;
    let object =
        h.call(Some(&session), "DOM.resolveNode", json!({ "backendNodeId": node, "executionContextId": ctx })).await?;
    let Some(object) = object["object"]["objectId"].as_str() else {
        return Ok(Err("the node is gone".into()));
    };
    let call = json!({
        "objectId": object,
        "functionDeclaration": "function (mode) { return globalThis.__grantLedgerGuard.arm(this, mode); }",
        "arguments": [{ "value": mode.code() }],
        "returnByValue": true,
    });
    let r = h.call(Some(&session), "Runtime.callFunctionOn", call).await;
    h.send(Some(&session), "Runtime.releaseObject", json!({ "objectId": object }));
    let mut r = r?;
    thrown(&r, "Runtime.callFunctionOn")?;
    let raw: RawArm = serde_json::from_value(r["result"]["value"].take()).unwrap_or_default();
    let arming = match (raw.arming, raw.refused) {
        (Some(arming), None) => arming,
        (_, Some(why)) => return Ok(Err(why)),
        (None, None) => return Ok(Err("the page holds no guard: the act cannot be held to the node".into())),
    };
    let held = Held { arming, frames };
    // Keys reach whatever holds focus inside a closed shadow root, which the guard sees only as
    // its host: an element hosting one cannot be held to its focus.
    if mode == GuardMode::Keys {
        let described = h
            .call(Some(&session), "DOM.describeNode", json!({ "backendNodeId": node, "depth": 0, "pierce": true }))
            .await;
        let closed = described.as_ref().map(|d| {
            d["node"]["shadowRoots"]
                .as_array()
                .is_some_and(|roots| roots.iter().any(|r| r["shadowRootType"] == "closed"))
        });
        if !matches!(closed, Ok(false)) {
            release(h, Some(held)).await;
            described?;
            return Ok(Err("the node hosts a closed shadow root: its focus cannot be seen".into()));
        }
    }
    Ok(Ok(held))
}

/// Every frame of the tab but its top document, each with its guard's stops read (and so reset):
/// frames in the tab's process through its session, frames with a process of their own through
/// theirs.
async fn frames(h: &Handle, session: &str) -> Vec<(String, i64)> {
    let mut frames: Vec<(String, String)> = Vec::new();
    if let Ok(tree) = h.call(Some(session), "Page.getFrameTree", json!({})).await {
        let mut ids = Vec::new();
        children(&tree["frameTree"], &mut ids);
        frames.extend(ids.into_iter().map(|f| (session.to_owned(), f)));
    }
    frames.extend(h.frame_sessions());
    let each = frames.into_iter().map(|(s, f)| async move {
        // A frame of another process is not reachable through the tab's session: its own
        // session counts it.
        let ctx = context(h, &s, &f).await.ok()?;
        eval(h, &s, ctx, "globalThis.__grantLedgerGuard.stops()").await.ok()?;
        Some((s, ctx))
    });
    futures_util::future::join_all(each).await.into_iter().flatten().collect()
}

/// How many trusted inputs the frames stopped since [`frames`] read them.
async fn frame_stops(h: &Handle, frames: &[(String, i64)]) -> u64 {
    let each = frames
        .iter()
        .map(|(s, ctx)| async move { eval(h, s, *ctx, "globalThis.__grantLedgerGuard.stops()").await.ok()?.as_u64() });
    futures_util::future::join_all(each).await.into_iter().flatten().sum()
}

/// Gives the guard back when the act ends before its input: disarms it.
pub async fn release(h: &Handle, held: Option<Held>) {
    let Some(held) = held else { return };
    if let Ok((session, main)) = tab(h)
        && let Ok(ctx) = context(h, &session, &main).await
    {
        let _ = eval(h, &session, ctx, &format!("globalThis.__grantLedgerGuard.finish({})", held.arming)).await;
    }
}

#[derive(Deserialize)]
struct RawAfter {
    page: PageRead,
    guard: Option<GuardReport>,
}

/// After an act: [`TURNS`] turns of the tab's event loop, then the page as it is and what the
/// guard stopped since `held` was armed (which it disarms), in the page and its frames. `Ok(None)`
/// when a JavaScript dialog is open, which holds every script of the page.
pub async fn after(h: &Handle, held: Option<&Held>) -> Result<Option<(PageRead, Option<GuardReport>)>, FenceError> {
    let deadline = tokio::time::Instant::now() + BOUND;
    let mut arming = held.map(|h| h.arming);
    let result = loop {
        let (session, main) = tab(h)?;
        let expression = format!(
            "globalThis.__grantLedgerGuard.after({}, {TURNS})",
            arming.map_or_else(|| "null".to_owned(), |a| a.to_string())
        );
        let read = match context(h, &session, &main).await {
            Ok(ctx) => eval(h, &session, ctx, &expression).await,
            Err(e) => Err(e),
        };
        match read {
            Ok(v) => {
                let raw: RawAfter =
                    serde_json::from_value(v).map_err(|e| FenceError::Endpoint(format!("the guard's report: {e}")))?;
                break Some((raw.page, raw.guard));
            }
            // A dialog holds every script of the page.
            Err(FenceError::Dialog) => break None,
            // The document went away under the call: read the new one, whose guard was never
            // armed.
            Err(e) if e.document_gone() && tokio::time::Instant::now() < deadline => arming = None,
            Err(e) => return Err(e),
        }
    };
    let Some(held) = held else { return Ok(result) };
    let stopped = frame_stops(h, &held.frames).await;
    Ok(result.map(|(page, guard)| {
        let mut guard =
            guard.unwrap_or_else(|| GuardReport { held: "none".into(), alive: true, ..GuardReport::default() });
        guard.stopped += stopped;
        crate::metrics::METRICS.guard_stops.get_or_create(&[("where", "act")]).inc_by(guard.stopped);
        (page, Some(guard))
    }))
}

/// Calls `script` (a function body over `arguments`) in the guard's isolated world of the tab's
/// top document: the page can neither see the call nor replace what it uses. Returns the
/// DevTools result object (by value, or as a remote object).
pub async fn call_in_world(h: &Handle, script: &str, args: &[Value], by_value: bool) -> Result<Value, FenceError> {
    let args = args.iter().map(|a| json!({ "value": a })).collect();
    let world = world(h).await?;
    call_in(h, &world, script, args, by_value).await
}

/// The tab's session and the guard's isolated world in its top document.
pub(crate) async fn world(h: &Handle) -> Result<(String, i64), FenceError> {
    let (session, main) = tab(h)?;
    let ctx = context(h, &session, &main).await?;
    Ok((session, ctx))
}

/// [`call_in_world`] with DevTools call arguments as they are (`{"value": …}` or
/// `{"objectId": …}`), in a world already looked up.
pub(crate) async fn call_in(
    h: &Handle,
    (session, ctx): &(String, i64),
    script: &str,
    args: Vec<Value>,
    by_value: bool,
) -> Result<Value, FenceError> {
    let params = json!({
        "functionDeclaration": format!("function () {{\n{script}\n}}"),
        "executionContextId": ctx,
        "arguments": args,
        "returnByValue": by_value,
        "objectGroup": READ_GROUP,
    });
    let answer = h.call_within(Some(session), "Runtime.callFunctionOn", params, READ_BOUND).await;
    if matches!(answer, Err(FenceError::Endpoint(_))) {
        // A read that ran past its bound still runs: stop it.
        h.send(Some(session), "Runtime.terminateExecution", json!({}));
    }
    let mut r = answer?;
    thrown(&r, "Runtime.callFunctionOn")?;
    Ok(r["result"].take())
}

/// The remote objects a read hands out, released together by [`release_reads`].
pub(crate) const READ_GROUP: &str = "grant-ledger-read";
/// How long one read may take: a page of deeply nested controls takes seconds.
pub(crate) const READ_BOUND: Duration = Duration::from_secs(15);

/// Releases every remote object the reads handed out.
pub fn release_reads(h: &Handle) {
    if let Some((session, _)) = h.tab() {
        h.send(Some(&session), "Runtime.releaseObjectGroup", json!({ "objectGroup": READ_GROUP }));
    }
}

/// The WebDriver element of a remote object in the tab's top document, named as chromedriver
/// names it; `None` when the object is not a node. The object is released.
pub async fn element_of(h: &Handle, object: &Value) -> Result<Option<ElementRef>, FenceError> {
    Ok(element_node(h, object).await?.map(|(el, _)| el))
}

/// [`element_of`], with the element's backend node id.
pub async fn element_node(h: &Handle, object: &Value) -> Result<Option<(ElementRef, i64)>, FenceError> {
    let Some(id) = object["objectId"].as_str() else { return Ok(None) };
    let (session, main) = tab(h)?;
    let described = h.call(Some(&session), "DOM.describeNode", json!({ "objectId": id })).await;
    h.send(Some(&session), "Runtime.releaseObject", json!({ "objectId": id }));
    let Some(node) = described?["node"]["backendNodeId"].as_i64() else { return Ok(None) };
    let tree = h.call(Some(&session), "Page.getFrameTree", json!({})).await?;
    let loader = tree["frameTree"]["frame"]["loaderId"].as_str().unwrap_or_default().to_owned();
    Ok(Some((ElementRef::from(format!("f.{main}.d.{loader}.e.{node}")), node)))
}

/// Calls `function` (a declaration) on remote object `object`; by value or as a remote object.
pub async fn call_on(h: &Handle, object: &Value, function: &str, by_value: bool) -> Result<Value, FenceError> {
    let (session, _) = tab(h)?;
    let id = object["objectId"].as_str().unwrap_or_default();
    let params = json!({ "objectId": id, "functionDeclaration": function, "returnByValue": by_value, "objectGroup": READ_GROUP });
    let mut r = h.call(Some(&session), "Runtime.callFunctionOn", params).await?;
    thrown(&r, "Runtime.callFunctionOn")?;
    Ok(r["result"].take())
}

/// Releases a remote object.
pub fn release_object(h: &Handle, object: &Value) {
    if let (Some((session, _)), Some(id)) = (h.tab(), object["objectId"].as_str()) {
        h.send(Some(&session), "Runtime.releaseObject", json!({ "objectId": id }));
    }
}

/// Stands the guard down in every frame of the tab, now and in documents to come, for the owner
/// who took the tab over (the agent never acts in it again): their own input reaches a frame.
pub async fn hand_to_owner(h: &Handle) -> Result<(), FenceError> {
    let release = json!({ "source": crate::fence::OWNER_HAS_TAB, "worldName": WORLD, "runImmediately": true });
    for session in h.hand_to_owner() {
        let r = h.call(Some(&session), "Page.addScriptToEvaluateOnNewDocument", release.clone()).await?;
        thrown(&r, "Page.addScriptToEvaluateOnNewDocument")?;
    }
    Ok(())
}

/// Waits until `armed`'s act has settled, as the fence defines it: the act's document has run [`TURNS`]
/// turns of its event loop since the input (the caller's [`after`], a call on
/// the tab's own DevTools session), a round trip to the browser has flushed its events, no
/// frame is loading, and nothing navigated, loaded, opened a window or asked for a document
/// since the last look; each time something did, the document then in the tab runs its turns
/// again. Bounded by [`BOUND`] from the input; `false` when the bound ended it
/// first, which leaves the act's outcome unknown. A navigation a timer starts later is not the
/// act's (the record's limits of page script).
pub async fn settle(armed: &Armed, input_sent: Instant) -> bool {
    let deadline = input_sent + BOUND;
    let mut seen = armed.activity_at_arming();
    loop {
        let _ = armed.handle().call(None, "Browser.getVersion", json!({})).await;
        while armed.handle().loading() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let now = armed.handle().activity();
        if armed.handle().loading() || (now != seen && Instant::now() >= deadline) {
            return false;
        }
        if now == seen {
            return true;
        }
        seen = now;
        let left = deadline.saturating_duration_since(Instant::now());
        let _ = tokio::time::timeout(left, after(armed.handle(), None)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_driver_s_element_names_give_frame_and_node() {
        let el =
            ElementRef::from("f.46EA77470A6D62F56B6F2E9545ABC1A3.d.BE467EFEBF12BEA7AE515F4985213824.e.2".to_owned());
        assert_eq!(frame_and_node(&el), Some(("46EA77470A6D62F56B6F2E9545ABC1A3".into(), 2)));
        assert_eq!(frame_and_node(&ElementRef::from("123".to_owned())), None);
    }
}
