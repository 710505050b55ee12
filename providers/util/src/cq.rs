//! cq (being written)
