//! Handoff's messages ([`crate::Msg::Handoff`]): [`HandoffMsg::Objects`], sent by ownership
//! and hinted handoff alike, is answered by [`HandoffMsg::Ack`] or [`crate::Msg::Error`].

use crate::anti_entropy::messages::AaeItem;
use serde::{Deserialize, Serialize};

/// A message of ownership handoff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HandoffMsg {
    /// Merge these objects (keys the sender no longer owns, or hints it held for the
    /// receiver; a repair path, no limits) and acknowledge.
    Objects {
        /// The objects, each `Some`.
        items: Vec<AaeItem>,
    },
    /// The answer to [`HandoffMsg::Objects`]: every object merged.
    Ack,
}
