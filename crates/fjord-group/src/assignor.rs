//! Server-side assignors for KIP-848 consumer groups (uniform, range). Owned by the KIP-848 engineer.
