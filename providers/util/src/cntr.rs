//! cntr (being written)
