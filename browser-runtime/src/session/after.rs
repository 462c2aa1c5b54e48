//! What an act did, once its input is sent: its wait, the page after it and what the guard
//! stopped meanwhile, and what the fence refused while it settled.

use crate::config::BrowserConfig;
use crate::fence::{Armed, FenceError, Handle};
use crate::guard::{self, GuardMode, PageRead};
use crate::page::{self, ReadError};

use super::{ActOutcome, Session, WaitFor, origin_of};

impl Session {
    /// What the act did: its wait, the page after it and what the guard stopped meanwhile, and
    /// under a constraint what the fence refused while it settled.
    #[allow(clippy::too_many_arguments)] // the act's own state, handed over once
    pub(super) async fn after_act(
        &mut self,
        wait_for: WaitFor,
        client: &fantoccini::Client,
        devtools: &Handle,
        live_page: &PageRead,
        held: Option<guard::Held>,
        mode: Option<GuardMode>,
        armed: Option<Armed>,
        dispatched: ActOutcome,
        focus_counts: bool,
        config: &BrowserConfig,
    ) -> ActOutcome {
        let input_sent = std::time::Instant::now();
        let waited = match wait_for {
            WaitFor::None => Ok(()),
            WaitFor::Settle => page::settle(client).await.map_err(ReadError::Driver),
            WaitFor::Navigation => page::navigation(client, devtools, live_page).await,
            WaitFor::Dialog => wait_dialog(client).await,
        };
        let unknown =
            |detail: String| ActOutcome { outcome_unknown: true, changed: true, detail, ..dispatched.clone() };
        let mut outcome = match waited {
            // A dialog opened by the act answers every script: the page did change.
            Err(ReadError::Driver(e)) if e.is_unexpected_alert_open() => ActOutcome { changed: true, ..dispatched },
            Err(ReadError::DevTools(FenceError::Dialog)) => ActOutcome { changed: true, ..dispatched },
            Err(e) => {
                let why = self.read_failed(e, config).await;
                unknown(why.to_string())
            }
            // The page after the act, once everything the act queued without delay has run, and
            // what the guard stopped meanwhile.
            Ok(()) => match guard::after(devtools, held.as_ref()).await {
                Ok(None) => ActOutcome { changed: true, ..dispatched },
                Ok(Some((p, report))) => {
                    // A key press moves focus as its effect (Tab); a click's focus is its own doing.
                    let changed = p.url != live_page.url
                        || p.time_origin != live_page.time_origin
                        || p.sig != live_page.sig
                        || p.sig.is_empty()
                        || (focus_counts && p.focus != live_page.focus);
                    // A press, click, key or text the guard stopped, a guard the page disarmed or
                    // whose document it reopened leaves the outcome unknown. A document the act
                    // replaced took its guard with it.
                    let same_document = p.time_origin == live_page.time_origin;
                    match report {
                        Some(r) if r.stopped > 0 => unknown(format!(
                            "the guard stopped {} press(es), click(s) or key(s) aimed elsewhere",
                            r.stopped
                        )),
                        Some(r) if same_document && !r.alive => {
                            unknown("the page reopened its document during the act: the guard no longer held it".into())
                        }
                        Some(r) if same_document && r.held != "armed" && held.is_some() => {
                            unknown("the guard was not held through the act".into())
                        }
                        // A click whose input never reached the element went somewhere the
                        // guard could not see (a frame the page brought in stopped it there).
                        Some(r) if same_document && mode == Some(GuardMode::Click) && !r.reached => {
                            unknown("the click did not reach the node".into())
                        }
                        _ => ActOutcome { changed, ..dispatched },
                    }
                }
                Err(e) => unknown(format!("the page could not be read after the act: {e}")),
            },
        };
        if let Some(armed) = armed {
            if !guard::settle(&armed, input_sent).await {
                outcome.outcome_unknown = true;
                outcome.changed = true;
                outcome.detail = format!("the page did not settle within {:?}", guard::BOUND);
            }
            let report = armed.finish();
            if !report.refused.is_empty() || report.opened > 0 {
                // A refused document leaves the browser's error page: what the act did is unknown.
                outcome.outcome_unknown = true;
                outcome.changed = true;
                let places: Vec<String> =
                    report.refused.iter().map(|u| origin_of(u).unwrap_or_else(|| "a non-https URL".into())).collect();
                let fenced = format!(
                    "the fence refused {} request(s) outside the act's scope ({}) and closed {} new window(s)",
                    report.refused.len(),
                    places.join(", "),
                    report.opened
                );
                outcome.detail =
                    if outcome.detail.is_empty() { fenced } else { format!("{}; {fenced}", outcome.detail) };
            }
        }
        outcome
    }
}

/// Waits, bounded, until a browser dialog or a modal dialog element is open.
async fn wait_dialog(client: &fantoccini::Client) -> Result<(), ReadError> {
    let deadline = tokio::time::Instant::now() + guard::BOUND;
    loop {
        match client.get_alert_text().await {
            Ok(_) => return Ok(()),
            Err(e) if e.is_no_such_alert() => {}
            Err(e) => return Err(ReadError::Driver(e)),
        }
        let open = client
            .execute("return !!document.querySelector('dialog[open], [role=dialog], [role=alertdialog]');", vec![])
            .await
            .map_err(ReadError::Driver)?;
        if open.as_bool() == Some(true) || tokio::time::Instant::now() > deadline {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}
