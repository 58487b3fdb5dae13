//! Local lab topology (being written).
