//! rocklet-node (being written)
