//! The Meridian node (being written).
