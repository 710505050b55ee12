//! Small programs a new user of fabric reads first (see `src/bin/`).

#![forbid(unsafe_code)]
