//! The HTTP/2 transport (placeholder, being written).
