//! Renderers for lockcheck results.
