//! The grant lifecycle as a pure domain: a `World` folded from events, commands decided into
//! events, and `authorize` deciding one `browser.act` in the decision record's order. No IO and
//! no clock: time and new ids come in with each call.

mod authorize;
mod decide;
mod error;
mod world;

pub use authorize::*;
pub use decide::*;
pub use error::*;
pub use world::*;
