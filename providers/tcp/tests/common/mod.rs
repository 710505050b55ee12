//! Set-up shared by the tcp provider's tests (each test binary uses part of it):
//! what every provider's tests share, from `providers/util/tests/shared`.

#![allow(dead_code)]

#[path = "../../../util/tests/shared/endpoint.rs"]
mod endpoint;

pub use endpoint::*;
