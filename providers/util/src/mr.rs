//! mr (being written)
