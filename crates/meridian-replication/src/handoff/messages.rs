//! Ownership handoff's messages ([`crate::Msg::Handoff`]): [`HandoffMsg::Objects`] is answered
//! by [`HandoffMsg::Ack`] or [`crate::Msg::Error`]. (Hinted handoff needs none of its own: a
//! hint is delivered as a plain [`crate::EventualMsg::Replicate`].)

use crate::anti_entropy::messages::AaeItem;
use serde::{Deserialize, Serialize};

/// A message of ownership handoff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HandoffMsg {
    /// Ownership handoff: merge these objects (keys the sender no longer owns; a repair
    /// path, no limits) and acknowledge.
    Objects {
        /// The objects, each `Some`.
        items: Vec<AaeItem>,
    },
    /// The answer to [`HandoffMsg::Objects`]: every object merged.
    Ack,
}
