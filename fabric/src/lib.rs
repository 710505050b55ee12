//! fabric
