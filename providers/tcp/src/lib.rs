//! tcp
