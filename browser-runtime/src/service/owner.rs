//! The owner's own calls, through the gateway: a look at the tab a card was asked in, taking it
//! over, and their input to it once taken.

use proto::runtime as pb;
use tonic::{Request, Response, Status};

use crate::picture::Element;
use crate::session::{OwnerInput, Picture, Redeem};

use super::convert::{invalid, session_status};

use super::shared::{BrowserRuntime, note_open};

impl<R: Redeem + 'static> BrowserRuntime<R> {
    pub(super) async fn live_view_call(
        &self,
        req: Request<pb::LiveViewRequest>,
    ) -> Result<Response<pb::LiveViewReply>, Status> {
        let owner = self.owner(&req).await?;
        let r = req.get_ref();
        let mut s = self.owners_tab(&owner, &r.browser_profile_id, &r.snapshot_id).await?;
        // Once taken over the tab is the owner's: they see what they type, unmasked.
        let picture = if s.taken_over {
            Picture::TakenOver
        } else {
            Picture::Card { snapshot_id: &r.snapshot_id, node_ref: Some(r.node_ref.as_str()).filter(|n| !n.is_empty()) }
        };
        let view = bounded!(self, s, s.live_view(picture, &self.config.browser)).map_err(session_status)?;
        Ok(Response::new(live_reply(view)))
    }

    pub(super) async fn take_over_call(
        &self,
        req: Request<pb::TakeOverRequest>,
    ) -> Result<Response<pb::TakeOverReply>, Status> {
        let owner = self.owner(&req).await?;
        let mut s = self.owners_tab(&owner, &req.get_ref().browser_profile_id, &req.get_ref().snapshot_id).await?;
        let release = req.get_ref().release;
        // Once the owner has acted in the tab it is theirs for good: it closes, never goes back.
        if release && s.owner_acted() {
            return Err(Status::failed_precondition("the owner has acted in this tab: it is not given back"));
        }
        s.taken_over = !release;
        tracing::info!(profile = %s.profile, release, "the owner took the tab over, or gave it back");
        Ok(Response::new(pb::TakeOverReply {}))
    }

    pub(super) async fn live_input_call(
        &self,
        req: Request<pb::LiveInputRequest>,
    ) -> Result<Response<pb::LiveViewReply>, Status> {
        use pb::live_input_request::Input;
        let owner = self.owner(&req).await?;
        let mut s = self.owners_tab(&owner, &req.get_ref().browser_profile_id, &req.get_ref().snapshot_id).await?;
        if !s.taken_over {
            return Err(Status::failed_precondition("the tab is the agent's until the owner takes it over"));
        }
        let req = req.into_inner();
        let expected = Some(req.expected_page.as_str()).filter(|p| !p.is_empty());
        let input = match req.input {
            Some(Input::Click(p)) => OwnerInput::Click { x: p.x, y: p.y },
            Some(Input::Text(t)) => OwnerInput::Text(t),
            Some(Input::Key(k)) => OwnerInput::Key(k),
            Some(Input::Answer(a)) => {
                OwnerInput::Answer { accept: a.accept, text: Some(a.text).filter(|t| !t.is_empty()), seen: a.seen }
            }
            Some(Input::Done(true)) => {
                let profile = s.profile.clone();
                s.close().await;
                s.closed = true;
                drop(s);
                let mut sessions = self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                sessions.retain(|_, e| {
                    !(e.tenant == owner.tenant && e.principal == owner.principal && e.profile == profile)
                });
                note_open(sessions.len());
                return Ok(Response::new(pb::LiveViewReply::default()));
            }
            Some(Input::Done(false)) | None => return Err(invalid("input", "is a click, text, a key or done")),
        };
        bounded!(self, s, s.owner_input(input, expected, &self.config.browser)).map_err(session_status)?;
        let view = bounded!(self, s, s.live_view(Picture::TakenOver, &self.config.browser)).map_err(session_status)?;
        Ok(Response::new(live_reply(view)))
    }
}

fn live_reply(view: crate::session::LiveView) -> pb::LiveViewReply {
    pb::LiveViewReply {
        page: view.page,
        png: view.png,
        dialog_open: view.dialog.is_some(),
        dialog: view.dialog.unwrap_or_default(),
        element: match view.element {
            Element::None => pb::PictureElement::None,
            Element::Outlined => pb::PictureElement::Outlined,
            Element::NotInView => pb::PictureElement::NotInView,
            Element::Gone => pb::PictureElement::Gone,
        } as i32,
        masked: view.masked,
        masked_fields: view.masked_fields,
    }
}
