//! The WebSocket transport (placeholder, being written).
