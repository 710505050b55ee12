//! matcher (being written)
