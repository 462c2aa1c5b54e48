//! The owner's hands on a tab they took over: the tab as it is now (or the dialog the page shows),
//! and their click, text and keys sent as their own input. The agent never reaches this tab again
//! (the service refuses its calls once the tab is taken over).

use super::{OwnerInput, Session, SessionError, key_text};
use crate::config::BrowserConfig;
use crate::picture;
use crate::picture::Element;

/// The tab as its owner sees it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveView {
    /// The page's origin and path, never its query or fragment; empty while a dialog hides it.
    pub page: String,
    /// A screenshot; empty while a dialog is open (the browser takes none then).
    pub png: Vec<u8>,
    /// The dialog the page shows, if one is open: its text as [`dialog_text`] shows it.
    pub dialog: Option<String>,
    /// Where the card's element is in the picture.
    pub element: Element,
    /// Fields a card redacts are painted over.
    pub masked: bool,
    /// How many were.
    pub masked_fields: u32,
}

/// What the picture of a card's tab shows: the card's element (its snapshot and ref) outlined,
/// and the fields a card redacts painted over; or, for a tab the owner took over, the page as is.
#[derive(Debug, Clone, Copy)]
pub enum Picture<'a> {
    Card { snapshot_id: &'a str, node_ref: Option<&'a str> },
    TakenOver,
}

/// The page a URL shows the owner: origin and path.
fn page_of(url: &url::Url) -> String {
    format!("{}{}", url.origin().ascii_serialization(), url.path())
}

/// A dialog's text as the owner is shown it: at most [`proto::limits::MAX_DIALOG_CHARS`]
/// characters, with control characters (but line breaks) and direction overrides removed, so the
/// page cannot make it read as something else.
fn dialog_text(raw: &str) -> String {
    let direction = |c: char| matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    raw.chars()
        .filter(|c| *c == '\n' || !(c.is_control() || direction(*c)))
        .take(proto::limits::MAX_DIALOG_CHARS)
        .collect()
}

impl Session {
    /// Whether the owner has sent input to this tab.
    pub fn owner_acted(&self) -> bool {
        self.acted_by_owner
    }

    /// The open dialog's text (as shown), if the page shows one.
    async fn dialog(&mut self, config: &BrowserConfig) -> Result<Option<String>, SessionError> {
        let client = self.client(config).await?;
        match client.get_alert_text().await {
            Ok(text) => Ok(Some(dialog_text(&text))),
            Err(e) if e.is_no_such_alert() => Ok(None),
            Err(e) => Err(self.failed(e, config).await),
        }
    }

    /// The tab as its owner sees it: the page's origin and path and a screenshot, or the dialog
    /// the page shows.
    pub async fn live_view(&mut self, picture: Picture<'_>, config: &BrowserConfig) -> Result<LiveView, SessionError> {
        if let Some(text) = self.dialog(config).await? {
            let (png, element, masked) = (Vec::new(), Element::None, false);
            return Ok(LiveView { page: String::new(), png, dialog: Some(text), element, masked, masked_fields: 0 });
        }
        let client = self.client(config).await?;
        let url = match client.current_url().await {
            Ok(u) => u,
            Err(e) => return Err(self.failed(e, config).await),
        };
        let Picture::Card { snapshot_id, node_ref } = picture else {
            let png = self.screenshot(config).await?;
            let (element, masked, masked_fields) = (Element::None, false, 0);
            return Ok(LiveView { page: page_of(&url), png, dialog: None, element, masked, masked_fields });
        };
        // The card's element, while the tab still shows the snapshot it was named in.
        let slot = node_ref.and_then(|r| self.node(snapshot_id, r).ok().map(|(slot, _)| slot));
        let (_, devtools) = self.running(config).await?;
        // The page held still, read before and after the picture: a field that moved anyway
        // (a layout the browser finished late) is masked where it was and where it is.
        let still = picture::hold_still(&devtools, true).await;
        let before = picture::read(&devtools, snapshot_id, slot).await;
        let png = match still {
            Ok(()) => self.screenshot(config).await,
            Err(e) => Err(SessionError::PageRefused(format!("the page could not be held still for its picture: {e}"))),
        };
        let after = picture::read(&devtools, snapshot_id, slot).await;
        let closed = picture::closed_hosts(&devtools).await;
        // Let go whatever happened: the page runs on as before.
        let released = picture::hold_still(&devtools, false).await;
        let png = png?;
        if let Err(e) = released {
            return Err(SessionError::PageRefused(format!("the page could not be let go after its picture: {e}")));
        }
        let (before, mut after) = match (before, after) {
            (Ok(b), Ok(a)) => (b, a),
            (Err(e), _) | (_, Err(e)) => return Err(self.read_failed(e, config).await),
        };
        after.closed = closed
            .map_err(|e| SessionError::PageRefused(format!("the page's closed parts could not be found: {e}")))?;
        let (png, element, masked_fields) = picture::draw(&png, &[&before, &after], slot.is_some())
            .map_err(|e| SessionError::PageRefused(format!("no picture of this page: {e}")))?;
        let element = if node_ref.is_some() && slot.is_none() { Element::Gone } else { element };
        Ok(LiveView { page: page_of(&url), png, dialog: None, element, masked: true, masked_fields })
    }

    /// The owner's click at (`x`, `y`) of the tab's viewport (the screenshot's pixels), text typed
    /// as it is, a named key, or an answer to the page's dialog: sent as the owner's own input.
    /// While a dialog is open only an answer naming it reaches the page, so neither a second
    /// press nor text meant for a field answers a dialog the owner has not seen. A click aimed at
    /// `expected_page` is refused once the tab shows another page.
    pub async fn owner_input(
        &mut self,
        input: OwnerInput,
        expected_page: Option<&str>,
        config: &BrowserConfig,
    ) -> Result<(), SessionError> {
        use fantoccini::actions::{InputSource, KeyAction, KeyActions, MOUSE_BUTTON_LEFT, MouseActions, PointerAction};
        // OK or Cancel on the page's dialog leaves nothing of the owner's in the tab: the owner
        // may give it back to the agent, which may not answer dialogs itself. Anything else the
        // owner does (a click, a key, text, a prompt's answer) keeps the tab theirs.
        self.acted_by_owner |= !matches!(&input, OwnerInput::Answer { text: None, .. });
        let open = self.dialog(config).await?;
        let (client, devtools) = self.running(config).await?;
        let input = match (open, input) {
            (Some(shown), OwnerInput::Answer { accept, text, seen }) => {
                if shown != seen {
                    return Err(SessionError::Stale("the page shows another dialog now: look again".into()));
                }
                if let Some(text) = text
                    && client.send_alert_text(&text).await.is_err()
                {
                    return Err(SessionError::Invalid("this dialog takes no text: answer OK or Cancel".into()));
                }
                let answered = if accept { client.accept_alert().await } else { client.dismiss_alert().await };
                return match answered {
                    Ok(()) => Ok(()),
                    Err(e) => Err(self.failed(e, config).await),
                };
            }
            (Some(_), _) => {
                return Err(SessionError::Dialog("the page shows a dialog: answer it first".into()));
            }
            (None, input) => input,
        };
        // The guard stops every trusted input in the tab's frames, for the agent's acts; the owner
        // acts in them too (a payment form is often one). The agent never acts here again.
        if !self.owner_frames {
            crate::guard::hand_to_owner(&devtools).await.map_err(|e| SessionError::Unavailable(e.to_string()))?;
            self.owner_frames = true;
        }
        let sent = match input {
            OwnerInput::Click { x, y } => {
                if let Some(expected) = expected_page {
                    let now = match client.current_url().await {
                        Ok(u) => page_of(&u),
                        Err(e) => return Err(self.failed(e, config).await),
                    };
                    if now != expected {
                        return Err(SessionError::Stale(format!(
                            "the tab shows {now} now, not the page of the picture: look again before clicking"
                        )));
                    }
                }
                let mouse = MouseActions::new("owner".into())
                    .then(PointerAction::MoveTo { duration: None, x: f64::from(x), y: f64::from(y) })
                    .then(PointerAction::Down { button: MOUSE_BUTTON_LEFT })
                    .then(PointerAction::Up { button: MOUSE_BUTTON_LEFT });
                client.perform_actions(mouse).await
            }
            OwnerInput::Text(text) => {
                let mut keys = KeyActions::new("owner".into());
                for c in text.chars() {
                    keys = keys.then(KeyAction::Down { value: c }).then(KeyAction::Up { value: c });
                }
                client.perform_actions(keys).await
            }
            OwnerInput::Key(key) => {
                let code = key_text(&key).and_then(|k| k.chars().next()).ok_or_else(|| {
                    SessionError::Invalid(format!(
                        "{key:?} is not a named key ({})",
                        classifier::coverage::KEYS.join(", ")
                    ))
                })?;
                let keys = KeyActions::new("owner".into())
                    .then(KeyAction::Down { value: code })
                    .then(KeyAction::Up { value: code });
                client.perform_actions(keys).await
            }
            OwnerInput::Answer { .. } => {
                return Err(SessionError::Stale("the page shows no dialog now: look again".into()));
            }
        };
        match sent {
            Ok(()) => Ok(()),
            Err(e) => Err(self.failed(e, config).await),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::dialog_text;

    #[test]
    fn a_dialog_reads_without_controls_or_direction_overrides_and_is_bounded() {
        assert_eq!(dialog_text("Pay\u{202e}001$ now\u{7}\nplease"), "Pay001$ now\nplease");
        assert_eq!(dialog_text(&"x".repeat(5000)).chars().count(), proto::limits::MAX_DIALOG_CHARS);
    }
}
