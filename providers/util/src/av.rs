//! av (being written)
