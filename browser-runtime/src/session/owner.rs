//! The owner's hands on a tab they took over: the tab as it is now (or the dialog the page shows),
//! and their click, text and keys sent as their own input. The agent never reaches this tab again
//! (the service refuses its calls once the tab is taken over).

use super::{OwnerInput, Session, SessionError, key_text};
use crate::config::BrowserConfig;

/// The tab as its owner sees it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveView {
    /// The page's origin and path, never its query or fragment; empty while a dialog hides it.
    pub page: String,
    /// A screenshot; empty while a dialog is open (the browser takes none then).
    pub png: Vec<u8>,
    /// The text of the dialog the page shows (from the website), if one is open.
    pub dialog: Option<String>,
}

/// The page a URL shows the owner: origin and path.
fn page_of(url: &url::Url) -> String {
    format!("{}{}", url.origin().ascii_serialization(), url.path())
}

impl Session {
    /// The open dialog's text, if the page shows one.
    async fn dialog(&mut self, config: &BrowserConfig) -> Result<Option<String>, SessionError> {
        let client = self.client(config).await?;
        match client.get_alert_text().await {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.is_no_such_alert() => Ok(None),
            Err(e) => Err(self.failed(e, config).await),
        }
    }

    /// The tab as its owner sees it: the page's origin and path and a screenshot, or the dialog
    /// the page shows.
    pub async fn live_view(&mut self, config: &BrowserConfig) -> Result<LiveView, SessionError> {
        if let Some(text) = self.dialog(config).await? {
            return Ok(LiveView { page: String::new(), png: Vec::new(), dialog: Some(text) });
        }
        let client = self.client(config).await?;
        let url = match client.current_url().await {
            Ok(u) => u,
            Err(e) => return Err(self.failed(e, config).await),
        };
        let png = self.screenshot(config).await?;
        Ok(LiveView { page: page_of(&url), png, dialog: None })
    }

    /// The owner's click at (`x`, `y`) of the tab's viewport (the screenshot's pixels), or the
    /// owner's text typed as it is, or a named key: sent as the owner's own input. A click aimed
    /// at `expected_page` is refused once the tab shows another page. While the page shows a
    /// dialog, Enter accepts it, Escape dismisses it, text answers a prompt, and a click waits.
    pub async fn owner_input(
        &mut self,
        input: OwnerInput,
        expected_page: Option<&str>,
        config: &BrowserConfig,
    ) -> Result<(), SessionError> {
        use fantoccini::actions::{InputSource, KeyAction, KeyActions, MOUSE_BUTTON_LEFT, MouseActions, PointerAction};
        let (client, devtools) = self.running(config).await?;
        // The guard stops every trusted input in the tab's frames, for the agent's acts; the owner
        // acts in them too (a payment form is often one). The agent never acts here again.
        if !self.owner_frames {
            crate::guard::hand_to_owner(&devtools).await.map_err(|e| SessionError::Unavailable(e.to_string()))?;
            self.owner_frames = true;
        }
        if self.dialog(config).await?.is_some() {
            let answered = match &input {
                OwnerInput::Key(k) if k == "Enter" => client.accept_alert().await,
                OwnerInput::Key(k) if k == "Escape" => client.dismiss_alert().await,
                OwnerInput::Text(text) => client.send_alert_text(text).await,
                _ => {
                    return Err(SessionError::Dialog(
                        "the page shows a dialog: Enter accepts it, Escape dismisses it, text answers it".into(),
                    ));
                }
            };
            return match answered {
                Ok(()) => Ok(()),
                Err(e) => Err(self.failed(e, config).await),
            };
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
        };
        match sent {
            Ok(()) => Ok(()),
            Err(e) => Err(self.failed(e, config).await),
        }
    }
}
