//! eq (being written)
