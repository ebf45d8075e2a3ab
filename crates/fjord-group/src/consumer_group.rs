//! KIP-848 consumer groups. Owned by the KIP-848 engineer.
